//! /proc/self/mountinfo, the fields we need: which mount is on top at a
//! path, its device and its file system type.

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
pub struct Entry {
    pub id: u64,
    pub parent: u64,
    pub dev: (u32, u32),
    pub at: PathBuf,
    pub fstype: String,
}

pub fn read() -> io::Result<Vec<Entry>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

/// `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw`
pub fn parse(text: &str) -> Vec<Entry> {
    text.lines().filter_map(entry).collect()
}

fn entry(line: &str) -> Option<Entry> {
    let f: Vec<&str> = line.split(' ').collect();
    let (major, minor) = f.get(2)?.split_once(':')?;
    let sep = f.iter().position(|&x| x == "-")?;
    Some(Entry {
        id: f.first()?.parse().ok()?,
        parent: f.get(1)?.parse().ok()?,
        dev: (major.parse().ok()?, minor.parse().ok()?),
        at: PathBuf::from(unescape(f.get(4)?)),
        fstype: unescape(f.get(sep + 1)?).to_string_lossy().into_owned(),
    })
}

/// The kernel writes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> OsString {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|o| o.iter().all(|c| (b'0'..=b'7').contains(c)));
        match oct {
            Some(o) if b[i] == b'\\' => {
                out.push(o.iter().fold(0u8, |n, c| n.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    OsString::from_vec(out)
}

/// The top mount at `at`: the one no other mount at `at` is stacked on.
pub fn top<'a>(all: &'a [Entry], at: &Path) -> Option<&'a Entry> {
    let here: Vec<&Entry> = all.iter().filter(|m| m.at == at).collect();
    here.iter()
        .rev()
        .find(|m| !here.iter().any(|o| o.parent == m.id))
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacked_mounts_and_escapes() {
        let text = "\
22 1 0:21 / / rw - ext4 /dev/root rw
42 22 0:39 / /tmp/a\\040b rw,nosuid - fuse.dcache dcache-mem rw
43 42 0:40 / /tmp/a\\040b rw,nosuid - fuse dcache-mem rw
";
        let all = parse(text);
        assert_eq!(all.len(), 3);
        let at = Path::new("/tmp/a b");
        assert_eq!(all[1].at, at);
        assert_eq!(all[1].fstype, "fuse.dcache");
        assert_eq!(top(&all, at).unwrap().dev, (0, 40));
        assert_eq!(top(&all, Path::new("/")).unwrap().id, 22);
        assert!(top(&all, Path::new("/tmp")).is_none());
    }
}
