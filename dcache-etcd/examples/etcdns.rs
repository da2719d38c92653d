//! A tiny shell over a shared etcd namespace, one operation per run:
//!
//! ```text
//! etcdns SPEC ls PATH | stat PATH | mkdir PATH | touch PATH | rm PATH |
//!             rmdir PATH | mv FROM TO | ln FROM TO | write PATH TEXT | cat PATH |
//!             rtt
//! ```
//!
//! SPEC is `http://host:2379[,http://host2:2379...][/prefix]`, a volume
//! made by `dcache format etcd:SPEC` (or `dcache_etcd::format`).

use std::sync::Arc;

use dcache::{At, RenameFlags, Vfs};
use dcache_etcd::EtcdFs;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: etcdns SPEC (ls|stat|mkdir|touch|rm|rmdir|cat) PATH | (mv|ln) FROM TO | write PATH TEXT | rtt");
        std::process::exit(2);
    }
    let fs = match EtcdFs::connect(&args[0]) {
        Ok(fs) => Arc::new(fs),
        Err(e) => {
            eprintln!("connect {}: {e}", args[0]);
            std::process::exit(1);
        }
    };
    let vfs = Vfs::new(fs.clone()).expect("root");
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let r: dcache::Result<()> = (|| match arg(1) {
        "ls" => vfs.as_root().readdir(At::Root, arg(2), 0, &mut |e| {
            println!("{:>8} {}", e.ino, String::from_utf8_lossy(&e.name));
            true
        }),
        "stat" => vfs
            .as_root()
            .stat(At::Root, arg(2))
            .map(|a| println!("{a:?}")),
        "mkdir" => vfs
            .as_cred(&dcache::Cred::current())
            .mkdir(At::Root, arg(2), 0o755)
            .map(drop),
        "touch" => vfs
            .as_cred(&dcache::Cred::current())
            .open(At::Root, arg(2), libc::O_CREAT | libc::O_WRONLY, 0o644)
            .map(drop),
        "rm" => vfs.as_root().unlink(At::Root, arg(2)),
        "rmdir" => vfs.as_root().rmdir(At::Root, arg(2)),
        "mv" => vfs
            .as_root()
            .rename(At::Root, arg(2), At::Root, arg(3), RenameFlags::NONE),
        "ln" => vfs
            .as_root()
            .link(At::Root, arg(2), At::Root, arg(3))
            .map(drop),
        "write" => {
            let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
            let f = vfs
                .as_cred(&dcache::Cred::current())
                .open(At::Root, arg(2), flags, 0o644)?;
            let data = arg(3).as_bytes();
            let mut off = 0;
            while off < data.len() {
                off += f.write(off as u64, &data[off..])?;
            }
            Ok(())
        }
        "cat" => {
            let f =
                vfs.as_cred(&dcache::Cred::current())
                    .open(At::Root, arg(2), libc::O_RDONLY, 0)?;
            let mut buf = vec![0u8; 1 << 16];
            let mut off = 0u64;
            loop {
                let n = f.read(off, &mut buf)?;
                if n == 0 {
                    break Ok(());
                }
                print!("{}", String::from_utf8_lossy(&buf[..n]));
                off += n as u64;
            }
        }
        "rtt" => fs
            .serializable_round_trip()
            .map(|d| println!("serializable get: {d:?}")),
        other => {
            eprintln!("unknown command {other}");
            std::process::exit(2);
        }
    })();
    if let Err(e) = r {
        eprintln!("{}: {e:?}", arg(1));
        std::process::exit(1);
    }
}
