//! Which backend a mount serves: `mem`, `passthrough:DIR`, `kernfs[:VARIANT]`,
//! or a [`Custom`](Backend::Custom) one that the caller builds (how
//! `dcache mount --backend etcd:...` serves dcache-etcd without this crate
//! depending on it).

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use dcache::fs::kernfs::{KernFs, ShowFn, StoreFn};
use dcache::fs::memfs::MemFs;
use dcache::fs::passthrough::{Passthrough, PassthroughOptions};
use dcache::fs::FileSystem;

use crate::options::MountOptions;

/// Makes a custom backend's file system; the error says why it cannot be
/// served.
pub type BuildFn = dyn Fn() -> Result<Arc<dyn FileSystem>, String> + Send + Sync;

/// A backend this crate does not know: a name and a function that makes it.
///
/// [`session::serve`](crate::session::serve) calls the function only in
/// the process that serves, after going to the background, so a backend may
/// start threads (an async runtime, a watch) when it is built: `fork` keeps
/// only the calling thread.
#[derive(Clone)]
pub struct Custom {
    /// The `fsname` shown in the mount table (for etcd: the spec).
    pub fsname: String,
    /// Read files around the page cache (`direct_io`) unless `-o` says.
    pub direct_io: bool,
    /// Makes the file system.
    pub build: Arc<BuildFn>,
    /// A line `build` may leave for the user (the etcd backend: which
    /// volume and cluster it joined), printed on stdout once the mount is
    /// up, before `dcache mount` returns.
    pub notice: Arc<std::sync::Mutex<Option<String>>>,
}

impl Custom {
    /// A custom backend called `fsname`, made by `build`.
    pub fn new(
        fsname: impl Into<String>,
        build: impl Fn() -> Result<Arc<dyn FileSystem>, String> + Send + Sync + 'static,
    ) -> Custom {
        Custom {
            fsname: fsname.into(),
            direct_io: false,
            build: Arc::new(build),
            notice: Arc::default(),
        }
    }
}

impl std::fmt::Debug for Custom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Custom")
            .field("fsname", &self.fsname)
            .field("direct_io", &self.direct_io)
            .finish_non_exhaustive()
    }
}

/// Two custom backends are equal when they are the same one (one build
/// function) under the same name.
impl PartialEq for Custom {
    fn eq(&self, o: &Custom) -> bool {
        self.fsname == o.fsname
            && self.direct_io == o.direct_io
            && Arc::ptr_eq(&self.build, &o.build)
    }
}

impl Eq for Custom {}

/// A backend named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// An empty in-memory filesystem (tmpfs semantics).
    Mem,
    /// A host directory, through held directory descriptors.
    Passthrough(PathBuf),
    /// A small generated kernfs tree (`rwlock` variant unless named).
    KernFs(String),
    /// Any other file system, made by the caller's function (not parsed
    /// from a string here: the command line recognises its own prefixes,
    /// such as `etcd:`, and builds this).
    Custom(Custom),
}

/// The forms [`Backend`]'s `FromStr` takes, as messages list them.
pub const FORMS: &[&str] = &["mem", "passthrough:DIR", "kernfs[:mutex|rwlock|rcu]"];

impl FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Backend, String> {
        Backend::parse_listing(s, &[])
    }
}

impl Backend {
    /// Parse a built-in backend ([`FORMS`]); the message for an unknown
    /// one lists them and then `more`, the forms the caller recognises
    /// itself (such as `dcache mount`'s `etcd:...`).
    pub fn parse_listing(s: &str, more: &[&str]) -> Result<Backend, String> {
        match s.split_once(':') {
            None if s == "mem" => Ok(Backend::Mem),
            None if s == "kernfs" => Ok(Backend::KernFs("rwlock".into())),
            Some(("kernfs", v)) => {
                KernFs::for_variant(v)
                    .map_err(|_| format!("unknown kernfs variant {v:?} (mutex, rwlock or rcu)"))?;
                Ok(Backend::KernFs(v.into()))
            }
            Some(("passthrough", dir)) if !dir.is_empty() => {
                Ok(Backend::Passthrough(PathBuf::from(dir)))
            }
            Some(("passthrough", _)) => {
                Err("passthrough needs a directory: passthrough:DIR".into())
            }
            _ => {
                let all: Vec<&str> = FORMS.iter().chain(more).copied().collect();
                let (last, rest) = all.split_last().expect("FORMS is not empty");
                Err(format!(
                    "unknown backend {s:?} ({} or {last})",
                    rest.join(", ")
                ))
            }
        }
    }

    /// The `fsname` shown in the mount table.
    pub fn fsname(&self) -> String {
        match self {
            Backend::Mem => "dcache-mem".into(),
            Backend::Passthrough(d) => d.display().to_string(),
            Backend::KernFs(_) => "dcache-kernfs".into(),
            Backend::Custom(c) => c.fsname.clone(),
        }
    }

    /// Generated files report a size that is not their length: read them
    /// around the page cache.
    pub fn wants_direct_io(&self) -> bool {
        match self {
            Backend::KernFs(_) => true,
            Backend::Custom(c) => c.direct_io,
            _ => false,
        }
    }

    /// Make the backend (an empty memfs, a passthrough of the directory,
    /// a generated kernfs tree, or whatever a custom backend's function
    /// makes); the error says why it cannot be served.
    pub fn build(&self) -> Result<Arc<dyn FileSystem>, String> {
        self.build_with(&MountOptions::default())
    }

    /// [`build`](Self::build), with what the mount options say of the
    /// backend (`-o no_file_handles`).
    pub fn build_with(&self, options: &MountOptions) -> Result<Arc<dyn FileSystem>, String> {
        Ok(match self {
            Backend::Mem => Arc::new(MemFs::new()),
            Backend::Passthrough(dir) => {
                let mut opts = PassthroughOptions::default();
                opts.file_handles = options.file_handles;
                Arc::new(
                    Passthrough::with_options(dir, opts)
                        .map_err(|e| format!("cannot serve {}: {e}", dir.display()))?,
                )
            }
            Backend::KernFs(v) => {
                let fs = KernFs::for_variant(v).map_err(|e| format!("kernfs {v}: {e}"))?;
                demo_tree(&fs).map_err(|e| format!("kernfs demo tree: {e}"))?;
                Arc::new(fs)
            }
            Backend::Custom(c) => (c.build)()?,
        })
    }
}

fn text(s: String) -> ShowFn {
    Box::new(move || s.clone().into_bytes())
}

/// A sysfs-like tree to look at:
///
/// ```text
/// devices/system/cpu/{online,possible}     "0-N"
/// devices/system/cpu/cpuK/online           "1"
/// bus/cpu/devices/cpuK -> ../../../devices/system/cpu/cpuK
/// kernel/uptime_ms                          milliseconds since mount
/// kernel/message                            what was last written to it
/// ```
///
/// Every node belongs to the user serving it (root's tree when root
/// serves it): a user's mount, which only that user may enter, can then
/// write `kernel/message`.
fn demo_tree(fs: &KernFs) -> dcache::Result<()> {
    let me = dcache::fs::Ctx::current();
    let own = |ino| fs.set_owner(ino, me.uid, me.gid).map(|()| ino);
    let root = own(fs.root())?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let range = if cpus == 1 {
        "0\n".to_string()
    } else {
        format!("0-{}\n", cpus - 1)
    };
    let devices = own(fs.create_dir(root, "devices", 0o755)?)?;
    let system = own(fs.create_dir(devices, "system", 0o755)?)?;
    let cpu = own(fs.create_dir(system, "cpu", 0o755)?)?;
    own(fs.create_file(cpu, "online", 0o444, text(range.clone()), None)?)?;
    own(fs.create_file(cpu, "possible", 0o444, text(range), None)?)?;
    let bus = own(fs.create_dir(root, "bus", 0o755)?)?;
    let bus_cpu = own(fs.create_dir(bus, "cpu", 0o755)?)?;
    let bus_devices = own(fs.create_dir(bus_cpu, "devices", 0o755)?)?;
    for k in 0..cpus {
        let name = format!("cpu{k}");
        let d = own(fs.create_dir(cpu, &name, 0o755)?)?;
        own(fs.create_file(d, "online", 0o644, text("1\n".into()), None)?)?;
        own(fs.create_link(bus_devices, &name, d)?)?;
    }
    let kernel = own(fs.create_dir(root, "kernel", 0o755)?)?;
    let start = Instant::now();
    let uptime: ShowFn =
        Box::new(move || format!("{}\n", start.elapsed().as_millis()).into_bytes());
    own(fs.create_file(kernel, "uptime_ms", 0o444, uptime, None)?)?;
    let msg = Arc::new(Mutex::new(b"hello\n".to_vec()));
    let m = msg.clone();
    let show: ShowFn = Box::new(move || m.lock().map(|v| v.clone()).unwrap_or_default());
    let store: StoreFn = Box::new(move |data: &[u8]| {
        if let Ok(mut v) = msg.lock() {
            *v = data.to_vec();
        }
        Ok(data.len())
    });
    own(fs.create_file(kernel, "message", 0o644, show, Some(store))?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse() {
        assert_eq!("mem".parse::<Backend>(), Ok(Backend::Mem));
        assert_eq!(
            "kernfs".parse::<Backend>(),
            Ok(Backend::KernFs("rwlock".into()))
        );
        assert_eq!(
            "kernfs:rcu".parse::<Backend>(),
            Ok(Backend::KernFs("rcu".into()))
        );
        assert_eq!(
            "passthrough:/tmp".parse::<Backend>(),
            Ok(Backend::Passthrough("/tmp".into()))
        );
        for bad in [
            "",
            "memfs",
            "passthrough",
            "passthrough:",
            "kernfs:spin",
            "x:y",
        ] {
            assert!(bad.parse::<Backend>().is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            "x:y".parse::<Backend>().unwrap_err(),
            "unknown backend \"x:y\" (mem, passthrough:DIR or kernfs[:mutex|rwlock|rcu])"
        );
        assert_eq!(
            Backend::parse_listing("bogus", &["etcd:URL"]).unwrap_err(),
            "unknown backend \"bogus\" (mem, passthrough:DIR, kernfs[:mutex|rwlock|rcu] or etcd:URL)"
        );
    }

    #[test]
    fn custom_backends_build_with_their_function() {
        let c = Custom::new(
            "my-fs",
            || Ok(Arc::new(MemFs::new()) as Arc<dyn FileSystem>),
        );
        let b = Backend::Custom(c.clone());
        assert_eq!(b.fsname(), "my-fs");
        assert!(!b.wants_direct_io());
        assert_eq!(b, Backend::Custom(c));
        let other = Custom::new("my-fs", || Err("no".to_string()));
        assert_ne!(b, Backend::Custom(other.clone()));
        assert_eq!(Backend::Custom(other).build().err().as_deref(), Some("no"));
        let fs = b.build().unwrap();
        assert!(fs.getattr(fs.root()).is_ok());
    }

    #[test]
    fn kernfs_demo_tree_resolves() {
        let fs = KernFs::for_variant("rcu").unwrap();
        demo_tree(&fs).unwrap();
        let online = fs.resolve("devices/system/cpu/cpu0/online").unwrap();
        assert_eq!(
            fs.getattr(online).unwrap().kind,
            dcache::fs::FileType::Regular
        );
        let link = fs.resolve("bus/cpu/devices/cpu0").unwrap();
        assert_eq!(
            fs.readlink(link).unwrap(),
            b"../../../devices/system/cpu/cpu0".to_vec()
        );
    }
}
