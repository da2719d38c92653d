//! Which CPUs the bench may use, and pinning a thread to one of them.
//!
//! will-it-scale pins task i to CPU i so that a run's numbers do not depend
//! on the scheduler's placement. We take the CPUs from our own affinity mask
//! (so `taskset` and cgroup cpusets are respected) and pin worker i to the
//! (i mod n)-th of them.

use std::mem;

/// The CPUs this process may run on, in increasing order; never empty.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is a plain bit array; all-zero is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size we pass;
    // pid 0 means the calling thread.
    let rc = unsafe { libc::sched_getaffinity(0, mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc == 0 {
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `cpu` is below CPU_SETSIZE, the bit count of `set`.
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
            .collect();
        if !cpus.is_empty() {
            return cpus;
        }
    }
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    (0..n).collect()
}

/// The CPU for worker `index` among `cpus` (wrapping when there are more
/// workers than CPUs).
pub fn cpu_for(cpus: &[usize], index: usize) -> usize {
    cpus[index % cpus.len()]
}

/// Pin the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: as in `allowed_cpus`, all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
    // SAFETY: `cpu` was checked to be below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size we pass; pid 0 is the
    // calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpus_are_sorted_and_nonempty() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        assert!(cpus.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn workers_wrap_around_the_cpus() {
        let cpus = [3, 5];
        let got: Vec<usize> = (0..5).map(|i| cpu_for(&cpus, i)).collect();
        assert_eq!(got, vec![3, 5, 3, 5, 3]);
    }

    #[test]
    fn pinning_to_an_allowed_cpu_works_and_a_huge_one_fails() {
        let cpus = allowed_cpus();
        let cpu = cpus[cpus.len() - 1];
        std::thread::spawn(move || {
            pin_current_thread(cpu).unwrap();
            assert_eq!(allowed_cpus(), vec![cpu]);
        })
        .join()
        .unwrap();
        assert!(pin_current_thread(usize::MAX).is_err());
    }
}
