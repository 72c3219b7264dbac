//! What a renderer gives up before it reads its first template: every
//! descriptor it inherited but its pipes, the right to gain privileges
//! (`no_new_privs`), and every system call rendering does not need (a
//! seccomp filter that kills the process on any other). A template that
//! found a way out of the template language would still find no file, no
//! socket and no program to run: `open`, `connect`, `execve` and the rest
//! end the renderer with `SIGSYS`, which its parent reports as that
//! template's failure.
//!
//! The allow list is what a render does after start-up (strace of a real
//! renderer): pipe reads and writes, memory (the allocator's `mmap`, `brk`,
//! `madvise`), locks and sleeps (the watchdog thread), the clock, random
//! seeds for hash maps, and what `abort` does when the address-space cap
//! is reached (a signal to itself).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// The system calls a confined renderer may make; any other kills it.
const ALLOWED: &[libc::c_long] = &[
    // Its pipes (stdin, stdout; stderr is /dev/null, where a panic's
    // message goes).
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_close,
    // Memory.
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_mprotect,
    libc::SYS_brk,
    libc::SYS_madvise,
    // Locks, sleeps, the clock (when the vDSO does not answer it), and
    // hash-map seeds.
    libc::SYS_futex,
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    libc::SYS_clock_gettime,
    libc::SYS_gettimeofday,
    libc::SYS_sched_yield,
    libc::SYS_getrandom,
    // Ending: a thread, the process, an abort (a failed allocation under
    // the address-space cap raises SIGABRT on itself).
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigaction,
    libc::SYS_sigaltstack,
    libc::SYS_gettid,
    libc::SYS_getpid,
];

/// Closes every descriptor above stderr: the parent's database and Redis
/// connections, listening sockets and files it opened without
/// close-on-exec are none of a template's business.
pub(crate) fn close_inherited_descriptors() {
    // SAFETY: close_range only closes descriptors; none above 2 is used by
    // this process (the renderer's own are stdin, stdout and stderr).
    let rc = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if rc != 0 {
        // A kernel before 5.9: close them one by one, as far as the limit
        // of open descriptors goes.
        // SAFETY: sysconf has no preconditions.
        let max = unsafe { libc::sysconf(libc::_SC_OPEN_MAX) };
        let max = if max > 0 { max.min(1 << 20) } else { 1024 } as libc::c_int;
        for fd in 3..max {
            // SAFETY: closing a descriptor this process does not use; an
            // error (not open) is ignored.
            unsafe { libc::close(fd) };
        }
    }
}

/// The filter for this machine's architecture.
fn filter() -> Result<BpfProgram, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("no system-call filter for {}: {e}", std::env::consts::ARCH))?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        ALLOWED.iter().map(|&nr| (nr, Vec::new())).collect();
    // A signal to itself only (an abort raises SIGABRT on its own thread):
    // never to the process that started it, or any other.
    // SAFETY: getpid has no preconditions.
    let own = unsafe { libc::getpid() } as u64;
    let to_itself = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, own)
        .and_then(|c| SeccompRule::new(vec![c]))
        .map_err(|e| format!("cannot build the system-call filter: {e}"))?;
    rules.insert(libc::SYS_tgkill, vec![to_itself]);
    let filter = SeccompFilter::new(
        rules,
        // Anything else: the whole process dies (SIGSYS), not one thread.
        SeccompAction::KillProcess,
        SeccompAction::Allow,
        arch,
    )
    .map_err(|e| format!("cannot build the system-call filter: {e}"))?;
    BpfProgram::try_from(filter).map_err(|e| format!("cannot compile the system-call filter: {e}"))
}

/// Sets `no_new_privs` and installs the filter on every thread of the
/// process. Call it once every thread the renderer needs has started.
pub(crate) fn confine() -> Result<(), String> {
    // SAFETY: prctl with these arguments only sets a flag of this process.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(format!(
            "cannot set no_new_privs: {}",
            std::io::Error::last_os_error()
        ));
    }
    let program = filter()?;
    seccompiler::apply_filter_all_threads(&program)
        .map_err(|e| format!("cannot install the system-call filter: {e}"))
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Command;

    /// Set in the child this test starts: which forbidden call to try.
    const TRY_ENV: &str = "HOOKFLEET_TEST_CONFINED_CALL";

    /// Runs in a child process (this test binary started again, filtered
    /// to this test): confines itself as a renderer does, then tries the
    /// call it was told to; reaching the end means it was allowed.
    #[test]
    fn confined_child() {
        let Ok(call) = std::env::var(TRY_ENV) else {
            return; // not the child: nothing to do
        };
        super::close_inherited_descriptors();
        super::confine().expect("confine");
        let path = std::ffi::CString::new("/etc/hostname").expect("path");
        match call.as_str() {
            "open" => {
                // SAFETY: a plain open of a path; the result is ignored.
                unsafe { libc::open(path.as_ptr(), libc::O_RDONLY) };
            }
            "connect" => {
                // SAFETY: socket() is what is forbidden; arguments are valid.
                unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
            }
            "execve" => {
                let argv = [path.as_ptr(), std::ptr::null()];
                let envp = [std::ptr::null()];
                // SAFETY: valid, NUL-terminated argument and environment
                // arrays.
                unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
            }
            "signal the parent" => {
                // SAFETY: signal 0 only asks whether the process exists.
                unsafe { libc::syscall(libc::SYS_tgkill, libc::getppid(), libc::getppid(), 0) };
            }
            "signal itself" => {
                // SAFETY: signal 0 to its own thread: only a check.
                let rc =
                    unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), libc::gettid(), 0) };
                assert_eq!(rc, 0, "tgkill on itself");
            }
            "render" => {
                // What a renderer does: memory, a clock, a sleep.
                let v: Vec<u64> = (0..1_000_000).collect();
                assert_eq!(v.len(), 1_000_000);
                let _ = std::time::SystemTime::now();
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            other => panic!("unknown call {other}"),
        }
        std::process::exit(0);
    }

    /// This test binary, started on [`confined_child`] with `call`.
    fn child(call: &str) -> std::process::ExitStatus {
        Command::new(std::env::current_exe().expect("this test binary"))
            .args(["--exact", "confine::tests::confined_child", "--nocapture"])
            .env(TRY_ENV, call)
            .output()
            .expect("run the child")
            .status
    }

    #[test]
    fn a_confined_renderer_that_opens_connects_or_executes_is_killed() {
        const SIGSYS: i32 = 31;
        for call in ["open", "connect", "execve", "signal the parent"] {
            let status = child(call);
            assert_eq!(
                status.signal(),
                Some(SIGSYS),
                "{call} was not killed by the filter: {status}"
            );
        }
    }

    #[test]
    fn a_confined_renderer_can_still_allocate_read_the_clock_and_sleep() {
        for call in ["render", "signal itself"] {
            let status = child(call);
            assert!(status.success(), "{call}: {status}");
        }
    }
}
