//! A read-only backend: inode N is entry N-1 of a Vec (1 is the root).
//! Used by `custom_backend` and, over FUSE, by dcache-fuse's `serve_custom`.
use dcache::oflags::{O_ACCMODE, O_RDONLY};
use dcache::{Attr, DirEntry, Errno, FileSystem, FileType, Ino, Result};

struct Node {
    attr: Attr,
    parent: Ino,
    kids: Vec<(String, Ino)>, // a directory's entries
    data: &'static [u8],
}

pub struct StaticFs(Vec<Node>);

impl StaticFs {
    pub fn new() -> StaticFs {
        let mut fs = StaticFs(Vec::new());
        fs.add(1, "", FileType::Directory, b""); // the root, inode 1
        fs
    }
    /// Add `name` (a directory, or a file holding `data`) to `parent`.
    pub fn add(&mut self, parent: Ino, name: &str, kind: FileType, data: &'static [u8]) -> Ino {
        let ino = self.0.len() as Ino + 1;
        let attr = Attr::new(ino, kind, 0o555).with_size(data.len() as u64);
        let kids = Vec::new();
        self.0.push(Node {
            attr,
            parent,
            kids,
            data,
        });
        if ino > 1 {
            self.0[parent as usize - 1].kids.push((name.into(), ino));
        }
        ino
    }
    fn node(&self, ino: Ino) -> Result<&Node> {
        self.0
            .get(ino.wrapping_sub(1) as usize)
            .ok_or(Errno::ESTALE)
    }
}

impl FileSystem for StaticFs {
    fn root(&self) -> Ino {
        1
    }
    fn lookup(&self, dir: Ino, name: &[u8]) -> Result<Option<Attr>> {
        let d = self.node(dir)?; // a directory: the Vfs answers ENOTDIR itself
        let found = d.kids.iter().find(|c| c.0.as_bytes() == name);
        Ok(found.map(|&(_, ino)| self.0[ino as usize - 1].attr))
    }
    fn getattr(&self, ino: Ino) -> Result<Attr> {
        Ok(self.node(ino)?.attr)
    }
    fn readdir(&self, dir: Ino, pos: u64, emit: &mut dyn FnMut(DirEntry) -> bool) -> Result<()> {
        let d = self.node(dir)?;
        let dots = [(".".to_string(), dir), ("..".to_string(), d.parent)];
        let all = dots.iter().chain(&d.kids).enumerate();
        for (i, (name, ino)) in all.skip(pos as usize) {
            let kind = self.0[*ino as usize - 1].attr.kind;
            if !emit(DirEntry::new(*ino, i as u64 + 1, kind, name.as_str())) {
                break;
            }
        }
        Ok(())
    }
    fn open(&self, _ino: Ino, flags: i32) -> Result<u64> {
        let read_only = flags & O_ACCMODE == O_RDONLY;
        read_only.then_some(0).ok_or(Errno::EROFS)
    }
    fn read(&self, ino: Ino, _fh: u64, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let data = self.node(ino)?.data;
        let rest = data.get(offset as usize..).unwrap_or_default();
        let n = buf.len().min(rest.len());
        buf[..n].copy_from_slice(&rest[..n]);
        Ok(n)
    }
}
