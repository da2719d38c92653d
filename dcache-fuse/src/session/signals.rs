//! Signals: SIGINT, SIGTERM and SIGHUP are blocked in every thread and
//! taken by one thread with `sigwait`, which prunes ([`super::prune`]) and
//! unmounts (lazily if the mount is busy); the workers then see the device
//! close, finish, and the report is printed. `fusermount3 -u` or `umount`
//! end the session the same way, but without warning: the kernel never
//! sends forgets at unmount, so what it still caches then is reported as
//! referenced. SIGUSR1 prunes and prints the count and the mount's resource use
//! ([`crate::usage`]) without unmounting. A
//! second SIGINT/SIGTERM/SIGHUP exits at once.

use super::mountpoint::OwnMount;
use super::prune::Pruner;

pub struct Blocked(libc::sigset_t);

/// Block SIGINT, SIGTERM, SIGHUP and SIGUSR1 in this thread (and so in
/// every thread it starts).
pub fn block() -> Result<Blocked, String> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before
    // use, and pthread_sigmask only reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1] {
            libc::sigaddset(&mut set, s);
        }
        let r = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if r != 0 {
            return Err(format!("pthread_sigmask: errno {r}"));
        }
        Ok(Blocked(set))
    }
}

/// A thread that waits for the blocked signals: SIGUSR1 prunes and
/// reports, the others prune and unmount.
pub fn spawn_waiter(set: Blocked, own: OwnMount, pruner: Pruner) -> Result<(), String> {
    std::thread::Builder::new()
        .name("dcache-signals".into())
        .spawn(move || {
            let mut first = true;
            loop {
                let mut sig = 0;
                // SAFETY: set is an initialised sigset; sig is a valid
                // out pointer.
                if unsafe { libc::sigwait(&set.0, &mut sig) } != 0 {
                    continue;
                }
                if sig == libc::SIGUSR1 {
                    eprintln!("dcache: pruned, {}", pruner.prune());
                    eprintln!("dcache: usage: {}", pruner.usage());
                    if let Some(line) = pruner.backend_status() {
                        eprintln!("dcache: backend: {line}");
                    }
                    continue;
                }
                if !first {
                    eprintln!("dcache: second signal, exiting without unmounting");
                    std::process::exit(130);
                }
                pruner.prune();
                match own.unmount(true) {
                    // Another mount sits on ours: keep serving, and
                    // let the next signal try again.
                    Err(e) if e.kind() == std::io::ErrorKind::ResourceBusy => {
                        eprintln!("dcache: cannot unmount: {e}");
                    }
                    Err(e) => {
                        eprintln!("dcache: cannot unmount: {e}");
                        first = false;
                    }
                    Ok(()) => first = false,
                }
            }
        })
        .map(|_| ())
        .map_err(|e| format!("signal thread: {e}"))
}
