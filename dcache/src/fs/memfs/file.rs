//! Regular-file contents as sparse 4 KiB pages, the way tmpfs keeps them in
//! the page cache: a hole (never written, or exposed by a truncate that grew
//! the file) has no page and reads as zeros, so `truncate -s 1T` costs
//! nothing and `st_blocks` counts only pages that exist.

use std::collections::BTreeMap;

/// Page size, also the `st_blksize` memfs reports.
pub const PAGE: usize = 4096;
const PAGE_U64: u64 = PAGE as u64;

/// Largest file size (Linux's MAX_LFS_FILESIZE on 64-bit); beyond it EFBIG.
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// Invariants: no page lies wholly at or beyond `size`, and the bytes of the
/// last page past `size` are zero, so growing the file exposes zeros.
#[derive(Debug, Default)]
pub struct FileData {
    size: u64,
    pages: BTreeMap<u64, Box<[u8]>>,
}

/// The page indices `[first, last]` that a byte range touches (`len > 0`).
fn page_span(offset: u64, len: u64) -> (u64, u64) {
    (offset / PAGE_U64, (offset + len - 1) / PAGE_U64)
}

impl FileData {
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Pages in memory (each 8 blocks of 512 bytes).
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
                Some(page) => dst.copy_from_slice(&page[in_page..in_page + chunk]),
                None => dst.fill(0),
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
        let (first, last) = page_span(offset, len as u64);
        let present = self.pages.range(first..=last).count() as u64;
        (last - first + 1) - present
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
            let page = self
                .pages
                .entry(pos / PAGE_U64)
                .or_insert_with(|| vec![0u8; PAGE].into_boxed_slice());
            page[in_page..in_page + chunk].copy_from_slice(&data[done..done + chunk]);
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
                    page[tail..].fill(0);
                }
            }
        }
        self.size = size;
        before - self.pages()
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
}
