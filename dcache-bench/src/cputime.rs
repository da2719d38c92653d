//! CPU time of the worker threads over the measured window.
//!
//! A pinned worker that gets less than its whole CPU (another process runs
//! there) produces numbers that say more about the machine's load than about
//! the code. The harness reads each worker's CPU clock at the start and the
//! end of the measurement and reports the share of the wall time the
//! workers actually ran, so a starved run is visible in the summary.

use std::time::Duration;

/// The calling thread's handle, for [`thread_cpu_time`] from another thread.
pub(crate) fn current_thread() -> u64 {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as u64 }
}

/// CPU time consumed so far by the thread `handle` (from
/// [`current_thread`]). The thread must not have been joined yet.
pub(crate) fn thread_cpu_time(handle: u64) -> Option<Duration> {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `handle` came from pthread_self of a thread that the caller
    // keeps unjoined, so it still names that thread; `clock` is writable.
    let rc = unsafe { libc::pthread_getcpuclockid(handle as libc::pthread_t, &mut clock) };
    if rc != 0 {
        return None;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock` is a valid clock id from above; `ts` is writable.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cpu_time_grows_while_busy() {
        let me = current_thread();
        let t0 = thread_cpu_time(me).unwrap();
        let end = std::time::Instant::now() + Duration::from_millis(20);
        let mut x = 0u64;
        while std::time::Instant::now() < end {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(thread_cpu_time(me).unwrap() > t0);
    }
}
