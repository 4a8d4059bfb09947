//! SIGTERM: stop accepting, finish the requests in flight, exit 0.
//!
//! In its container cube-server is PID 1 (`python -m elasticctr_cube server` execs it),
//! and the kernel delivers no signal to PID 1 whose action is the default: without a
//! handler the server ignored the SIGTERM of a rolling update and was SIGKILLed at the end
//! of the grace period, cutting off whatever it was answering. SIGTERM and SIGINT are
//! blocked in every thread and taken by one thread with `sigwait`, so no code runs in a
//! signal handler.

use std::io;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Block SIGTERM and SIGINT in this thread and in every thread it starts from now on
/// (call first in `main`); `wait` then receives them.
pub fn block_signals() -> io::Result<()> {
    // SAFETY: plain libc calls on a sigset_t we own.
    let rc = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut())
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// Wait for SIGTERM or SIGINT (blocked by `block_signals`); returns the signal number.
pub fn wait() -> i32 {
    // SAFETY: as above; sigwait writes the signal number into `signum`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        let mut signum = 0;
        while libc::sigwait(&set, &mut signum) != 0 {}
        signum
    }
}

/// Stop accepting on `listener`: a thread blocked in `accept` returns an error (Linux), and
/// connections not yet accepted are refused.
pub fn close_listener(listener: &TcpListener) {
    // SAFETY: shutdown(2) on a descriptor the listener owns; it stays open until dropped.
    unsafe {
        libc::shutdown(listener.as_raw_fd(), libc::SHUT_RDWR);
    }
}

/// Poll `done` every 10 ms until it holds or `timeout` passes; whether it held.
pub fn wait_until(timeout: Duration, done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}
