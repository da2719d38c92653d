//! Regular-file contents as sparse 4 KiB pages, the way tmpfs keeps them in
//! the page cache: a hole (never written, or exposed by a truncate that grew
//! the file) has no page and reads as zeros, so `truncate -s 1T` costs
//! nothing and `st_blocks` counts only pages that exist.
//!
//! A page `fallocate` reserved is kept as an entry with no memory
//! (`Reserved`): it counts in `st_blocks` and against the space limit,
//! reads as zeros, and `SEEK_DATA` passes over it, as tmpfs's fallocated
//! folios that were never written (not uptodate). As in tmpfs, a second
//! `fallocate` over it makes it data (`Zeros`: tmpfs clears it and marks
//! it uptodate), still without memory here. The first write gives a page
//! its bytes.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

/// Page size, also the `st_blksize` memfs reports.
pub const PAGE: usize = 4096;
const PAGE_U64: u64 = PAGE as u64;

/// Largest file size (Linux's MAX_LFS_FILESIZE on 64-bit); beyond it EFBIG.
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// One page of a file.
#[derive(Debug)]
enum Page {
    /// Reserved by `fallocate`, never written: zeros, a hole to SEEK_DATA.
    Reserved,
    /// Reserved twice: zeros that SEEK_DATA counts as data.
    Zeros,
    /// Written.
    Bytes(Box<[u8]>),
}

impl Page {
    /// Whether SEEK_DATA stops here (tmpfs: the folio is uptodate).
    fn is_data(&self) -> bool {
        !matches!(self, Page::Reserved)
    }

    fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        match self {
            Page::Bytes(b) => Some(b),
            _ => None,
        }
    }
}

/// Invariants: no written page lies wholly at or beyond `size` (pages
/// reserved with `FALLOC_FL_KEEP_SIZE` may), and the bytes of the last
/// page past `size` are zero, so growing the file exposes zeros.
#[derive(Debug, Default)]
pub struct FileData {
    size: u64,
    pages: BTreeMap<u64, Page>,
}

/// The page indices `[first, last]` that a byte range touches (`len > 0`).
fn page_span(offset: u64, len: u64) -> (u64, u64) {
    (offset / PAGE_U64, (offset + len - 1) / PAGE_U64)
}

fn zero_page() -> Box<[u8]> {
    vec![0u8; PAGE].into_boxed_slice()
}

impl FileData {
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Pages held, reserved ones included (each 8 blocks of 512 bytes).
    pub fn pages(&self) -> u64 {
        self.pages.len() as u64
    }

    /// Copy bytes from `offset` into `buf`; returns how many (0 at or past
    /// the end).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> usize {
        if offset >= self.size || buf.is_empty() {
            return 0;
        }
        let n = (self.size - offset).min(buf.len() as u64) as usize;
        let mut done = 0;
        while done < n {
            let pos = offset + done as u64;
            let in_page = (pos % PAGE_U64) as usize;
            let chunk = (PAGE - in_page).min(n - done);
            let dst = &mut buf[done..done + chunk];
            match self.pages.get(&(pos / PAGE_U64)) {
                Some(Page::Bytes(page)) => dst.copy_from_slice(&page[in_page..in_page + chunk]),
                _ => dst.fill(0),
            }
            done += chunk;
        }
        n
    }

    /// How many pages a write of `len` bytes at `offset` would add, so the
    /// caller can refuse it (ENOSPC) before changing anything.
    pub fn pages_needed(&self, offset: u64, len: usize) -> u64 {
        if len == 0 {
            return 0;
        }
        self.absent(offset, len as u64)
    }

    /// Write `data` at `offset`, growing the file if it ends past `size`.
    /// The caller has checked `offset + data.len() <= MAX_FILE_SIZE`.
    /// Returns the number of pages added.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> u64 {
        let before = self.pages();
        let mut done = 0;
        while done < data.len() {
            let pos = offset + done as u64;
            let in_page = (pos % PAGE_U64) as usize;
            let chunk = (PAGE - in_page).min(data.len() - done);
            let src = &data[done..done + chunk];
            let page = self.pages.entry(pos / PAGE_U64).or_insert(Page::Reserved);
            match page.bytes_mut() {
                Some(b) => b[in_page..in_page + chunk].copy_from_slice(src),
                // A whole new page: its bytes straight from the write, not
                // zeroed first.
                None if chunk == PAGE => *page = Page::Bytes(src.into()),
                None => {
                    let mut b = zero_page();
                    b[in_page..in_page + chunk].copy_from_slice(src);
                    *page = Page::Bytes(b);
                }
            }
            done += chunk;
        }
        if !data.is_empty() {
            self.size = self.size.max(offset + data.len() as u64);
        }
        self.pages() - before
    }

    /// Set the size; shrinking drops whole pages past the end and zeroes
    /// the tail of the new last page. Returns the number of pages freed.
    pub fn truncate(&mut self, size: u64) -> u64 {
        let before = self.pages();
        if size < self.size {
            let keep = size.div_ceil(PAGE_U64);
            drop(self.pages.split_off(&keep));
            let tail = (size % PAGE_U64) as usize;
            if tail != 0 {
                if let Some(page) = self.pages.get_mut(&(size / PAGE_U64)) {
                    if let Some(b) = page.bytes_mut() {
                        b[tail..].fill(0);
                    }
                }
            }
        }
        self.size = size;
        before - self.pages()
    }

    /// Pages absent from `[offset, offset + len)` (`len > 0`): what
    /// reserving or zeroing the range would add.
    pub fn absent(&self, offset: u64, len: u64) -> u64 {
        let (first, last) = page_span(offset, len);
        let present = self.pages.range(first..=last).count() as u64;
        (last - first + 1) - present
    }

    /// `fallocate` mode 0 (or `FALLOC_FL_KEEP_SIZE`): reserve every absent
    /// page of `[offset, offset + len)` (`len > 0`, the end checked against
    /// `MAX_FILE_SIZE`), and make pages reserved before data (zeros); the
    /// size grows to the range's end unless `keep_size`. Returns the
    /// number of pages added.
    pub fn allocate(&mut self, offset: u64, len: u64, keep_size: bool) -> u64 {
        let before = self.pages();
        let (first, last) = page_span(offset, len);
        for i in first..=last {
            match self.pages.entry(i) {
                Entry::Vacant(v) => {
                    v.insert(Page::Reserved);
                }
                Entry::Occupied(mut o) => {
                    if let Page::Reserved = o.get() {
                        o.insert(Page::Zeros);
                    }
                }
            }
        }
        if !keep_size {
            self.size = self.size.max(offset + len);
        }
        self.pages() - before
    }

    /// Zero the bytes of `[start, end)` that lie in pages holding data,
    /// for a range within one page.
    fn zero_in_page(&mut self, start: u64, end: u64) {
        if let Some(page) = self.pages.get_mut(&(start / PAGE_U64)) {
            if let Some(b) = page.bytes_mut() {
                let from = (start % PAGE_U64) as usize;
                b[from..from + (end - start) as usize].fill(0);
            }
        }
    }

    /// The whole pages inside `[offset, end)` as `[first, past)` indices,
    /// and zero the bytes of the partial pages at either edge.
    fn zero_edges(&mut self, offset: u64, end: u64) -> (u64, u64) {
        let first = offset.div_ceil(PAGE_U64);
        let past = end / PAGE_U64;
        if first > past {
            // The range lies inside one page.
            self.zero_in_page(offset, end);
            return (first, first);
        }
        if offset % PAGE_U64 != 0 {
            self.zero_in_page(offset, first * PAGE_U64);
        }
        if end % PAGE_U64 != 0 {
            self.zero_in_page(past * PAGE_U64, end);
        }
        (first, past)
    }

    /// `FALLOC_FL_PUNCH_HOLE`: `[offset, offset + len)` reads as zeros
    /// afterwards; the whole pages in it are freed, partial ones zeroed
    /// where they hold data. The size is unchanged. Returns the number of
    /// pages freed.
    pub fn punch(&mut self, offset: u64, len: u64) -> u64 {
        let before = self.pages();
        let (first, past) = self.zero_edges(offset, offset.saturating_add(len));
        if first < past {
            let mut tail = self.pages.split_off(&first);
            let mut after = tail.split_off(&past);
            self.pages.append(&mut after);
        }
        before - self.pages()
    }

    /// `FALLOC_FL_ZERO_RANGE`: `[offset, offset + len)` (`len > 0`) reads
    /// as zeros afterwards and every page it touches is reserved: whole
    /// pages become reserved ones (memory given back, a hole to
    /// SEEK_DATA, as ext4's unwritten extents), partial ones are zeroed
    /// where they hold bytes and reserved where absent. The size grows to
    /// the range's end unless `keep_size`. Returns the number of pages
    /// added.
    pub fn zero_range(&mut self, offset: u64, len: u64, keep_size: bool) -> u64 {
        let before = self.pages();
        let end = offset + len;
        let (first, past) = self.zero_edges(offset, end);
        for i in first..past {
            self.pages.insert(i, Page::Reserved);
        }
        let (lo, hi) = page_span(offset, len);
        for i in [lo, hi] {
            self.pages.entry(i).or_insert(Page::Reserved);
        }
        if !keep_size {
            self.size = self.size.max(end);
        }
        self.pages() - before
    }

    /// lseek's `SEEK_DATA` (`data`) or `SEEK_HOLE` from `offset`, as tmpfs
    /// answers them: data is a page that was written; `None` (ENXIO) at or
    /// past the end of the file, and for `SEEK_DATA` when no data follows.
    /// The end of the file counts as a hole.
    pub fn seek(&self, offset: u64, data: bool) -> Option<u64> {
        if offset >= self.size {
            return None;
        }
        let (first, last) = (offset / PAGE_U64, (self.size - 1) / PAGE_U64);
        let mut run = self.pages.range(first..=last);
        if data {
            let (i, _) = run.find(|(_, p)| p.is_data())?;
            return Some(offset.max(i * PAGE_U64));
        }
        // The first page from `first` on that holds no data.
        let mut next = first;
        for (&i, p) in run {
            if i != next || !p.is_data() {
                break;
            }
            next += 1;
        }
        Some(offset.max(next * PAGE_U64).min(self.size))
    }

    /// Where the next page holding bytes starts, at or after `offset`
    /// (`None`: only zeros there and after).
    pub fn next_data(&self, offset: u64) -> Option<u64> {
        self.pages
            .range(offset / PAGE_U64..)
            .find(|(_, p)| matches!(p, Page::Bytes(_)))
            .map(|(&i, _)| offset.max(i * PAGE_U64))
    }

    /// Zeros written sparsely (a copy from a hole): `[offset, offset +
    /// len)` reads as zeros, whole pages in it are freed, and the size
    /// grows to the range's end. Returns the number of pages freed.
    pub fn write_hole(&mut self, offset: u64, len: u64) -> u64 {
        let freed = self.punch(offset, len);
        self.size = self.size.max(offset + len);
        freed
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(f: &FileData) -> Vec<u8> {
        let mut buf = vec![0xAA; f.size() as usize + 10];
        let n = f.read(0, &mut buf);
        buf.truncate(n);
        buf
    }

    #[test]
    fn write_read_across_pages() {
        let mut f = FileData::default();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        assert_eq!(f.write(100, &data), 3);
        assert_eq!(f.size(), 10_100);
        let all = read_all(&f);
        assert!(all[..100].iter().all(|&b| b == 0));
        assert_eq!(&all[100..], &data[..]);
        let mut mid = [0u8; 7];
        assert_eq!(f.read(4090, &mut mid), 7);
        assert_eq!(&mid[..], &data[3990..3997]);
    }

    #[test]
    fn holes_read_zero_and_take_no_pages() {
        let mut f = FileData::default();
        f.write(3 * PAGE as u64, b"x");
        assert_eq!(f.pages(), 1);
        assert_eq!(f.pages_needed(0, 2 * PAGE + 1), 3);
        assert_eq!(f.pages_needed(3 * PAGE as u64, 1), 0);
        f.truncate(1 << 40);
        assert_eq!(f.pages(), 1);
        let mut buf = [1u8; 16];
        assert_eq!(f.read((1 << 40) - 16, &mut buf), 16);
        assert_eq!(buf, [0u8; 16]);
    }

    #[test]
    fn shrink_then_grow_exposes_zeros() {
        let mut f = FileData::default();
        f.write(0, &[7u8; 2 * PAGE]);
        assert_eq!(f.truncate(10), 1);
        f.truncate(2 * PAGE as u64);
        let all = read_all(&f);
        assert_eq!(&all[..10], &[7u8; 10]);
        assert!(all[10..].iter().all(|&b| b == 0));
    }

    #[test]
    fn read_past_end_is_zero_bytes() {
        let mut f = FileData::default();
        f.write(0, b"abc");
        let mut buf = [0u8; 4];
        assert_eq!(f.read(3, &mut buf), 0);
        assert_eq!(f.read(u64::MAX, &mut buf), 0);
        assert_eq!(f.read(1, &mut buf), 2);
        assert_eq!(&buf[..2], b"bc");
    }

    #[test]
    fn allocate_reserves_pages_that_read_zero_and_are_holes() {
        let mut f = FileData::default();
        assert_eq!(f.allocate(100, 3 * PAGE as u64, false), 4);
        assert_eq!((f.size(), f.pages()), (100 + 3 * PAGE as u64, 4));
        assert_eq!(f.seek(0, true), None);
        assert_eq!(f.seek(5, false), Some(5));
        // KEEP_SIZE past the end: blocks, no size.
        assert_eq!(f.allocate(1 << 20, 1, true), 1);
        assert_eq!(f.size(), 100 + 3 * PAGE as u64);
        f.write(PAGE as u64, b"x");
        assert_eq!(f.pages(), 5);
        assert_eq!(f.seek(0, true), Some(PAGE as u64));
        assert_eq!(f.seek(PAGE as u64 + 1, false), Some(2 * PAGE as u64));
        assert_eq!(read_all(&f)[PAGE], b'x');
        // Shrinking drops reserved pages past the end too.
        f.truncate(10);
        assert_eq!(f.pages(), 1);
    }

    #[test]
    fn punch_frees_whole_pages_and_zeroes_edges() {
        let mut f = FileData::default();
        f.write(0, &[7u8; 4 * PAGE]);
        assert_eq!(f.punch(PAGE as u64 - 1, 2 * PAGE as u64 + 2), 2);
        assert_eq!(f.size(), 4 * PAGE as u64);
        let all = read_all(&f);
        assert_eq!(all[PAGE - 2], 7);
        assert!(all[PAGE - 1..3 * PAGE + 1].iter().all(|&b| b == 0));
        assert_eq!(all[3 * PAGE + 1], 7);
        assert_eq!(f.seek(0, false), Some(PAGE as u64));
        assert_eq!(f.seek(PAGE as u64, true), Some(3 * PAGE as u64));
        // Inside one page: nothing freed.
        assert_eq!(f.punch(5, 10), 0);
        assert_eq!(read_all(&f)[5..15], [0u8; 10]);
    }

    #[test]
    fn zero_range_keeps_pages_reserved() {
        let mut f = FileData::default();
        f.write(0, &[7u8; 2 * PAGE]);
        assert_eq!(f.zero_range(10, 3 * PAGE as u64, true), 2);
        assert_eq!((f.size(), f.pages()), (2 * PAGE as u64, 4));
        let all = read_all(&f);
        assert_eq!(all[..10], [7u8; 10]);
        assert!(all[10..].iter().all(|&b| b == 0));
        // The first page keeps its data; the second is now a hole.
        assert_eq!(f.seek(0, false), Some(PAGE as u64));
        assert_eq!(f.zero_range(0, 1, false), 0);
        assert_eq!(f.zero_range(5 * PAGE as u64, 1, false), 1);
        assert_eq!(f.size(), 5 * PAGE as u64 + 1);
    }

    #[test]
    fn seek_past_end_and_trailing_hole() {
        let mut f = FileData::default();
        f.truncate(10 * PAGE as u64);
        assert_eq!(f.seek(0, true), None);
        assert_eq!(f.seek(0, false), Some(0));
        assert_eq!(f.seek(10 * PAGE as u64, false), None);
        f.write(3 * PAGE as u64 + 5, b"abc");
        assert_eq!(f.seek(0, true), Some(3 * PAGE as u64));
        assert_eq!(
            f.seek(3 * PAGE as u64 + 100, true),
            Some(3 * PAGE as u64 + 100)
        );
        assert_eq!(f.seek(3 * PAGE as u64, false), Some(4 * PAGE as u64));
        assert_eq!(f.seek(4 * PAGE as u64, true), None);
        assert_eq!(f.next_data(0), Some(3 * PAGE as u64));
        assert_eq!(f.next_data(4 * PAGE as u64), None);
        // A file ending inside a data page: the hole is the end.
        let mut g = FileData::default();
        g.write(0, b"hello");
        assert_eq!(g.seek(1, false), Some(5));
        assert_eq!(g.write_hole(2 * PAGE as u64, 3), 0);
        assert_eq!(g.size(), 2 * PAGE as u64 + 3);
        assert_eq!(g.seek(0, false), Some(PAGE as u64));
    }
}
