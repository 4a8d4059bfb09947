//! The listeners: one thread per connection on the data and control ports, the
//! connection limit (conns.rs), and the stop on SIGTERM (stop.rs).

use crate::state::{Config, State};
use crate::{binary, conns, http, stop};
use std::io::{self, BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::Duration;

/// How long a stopping server waits for the requests in flight: well inside Kubernetes'
/// default grace period of 30 s.
const DRAIN: Duration = Duration::from_secs(10);

/// Where to listen and how to behave; main.rs fills it from the command line.
pub struct Options {
    pub host: String,
    pub port: u16,
    pub control_host: String,
    pub control_port: u16,
    pub config: Config,
    pub idle_timeout: Duration,
    /// After SIGTERM: not ready for this long, still serving, before closing.
    pub shutdown_delay: Duration,
}

/// Listen on both ports and serve until SIGTERM/SIGINT, then drain and return.
/// Call `stop::block_signals` first, before any thread starts.
pub fn run(opts: Options) -> io::Result<()> {
    let listener = listen(&opts.host, opts.port, "data")?;
    let control = listen(&opts.control_host, opts.control_port, "control")?;
    let (shard, shard_num) = (opts.config.shard, opts.config.shard_num);
    let state = Arc::new(State::new(opts.config));
    eprintln!(
        "cube-server: shard {shard} of {shard_num} listening on {}, control on {} (no version loaded yet)",
        listener.local_addr()?,
        control.local_addr()?,
    );
    let idle_timeout = opts.idle_timeout;
    {
        let state = Arc::clone(&state);
        std::thread::spawn(move || serve_control(control, state, idle_timeout));
    }
    let listener = Arc::new(listener);
    {
        let (listener, state) = (Arc::clone(&listener), Arc::clone(&state));
        let delay = opts.shutdown_delay;
        std::thread::spawn(move || stop_on_signal(&listener, &state, delay));
    }
    for stream in listener.incoming() {
        if state.closing.load(SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        // Over the limit with every connection busy: refuse rather than spawn without bound.
        let Some(conn) = state.conns.admit(&stream) else {
            continue;
        };
        let state = Arc::clone(&state);
        let spawned = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                serve(stream, Arc::clone(&state), &conn, idle_timeout);
                state.conns.leave(&conn);
            });
        if let Err(e) = spawned {
            eprintln!("cube-server: cannot start a connection thread: {e}");
        }
    }
    // Closing: wait for the connections still answering (the idle ones were closed).
    state.conns.close_idle();
    let drained = stop::wait_until(DRAIN, || state.conns.count() == 0);
    eprintln!(
        "cube-server: stopped{}",
        if drained {
            ""
        } else {
            " (connections still open after the drain time)"
        }
    );
    Ok(())
}

fn listen(host: &str, port: u16, what: &str) -> io::Result<TcpListener> {
    TcpListener::bind((host, port)).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot listen on {host}:{port} ({what}): {e}"),
        )
    })
}

/// One connection: requests one at a time until the peer closes, an error, or the
/// connection was idle too long (its read timeout) or closed to make room (conns.rs).
fn serve(stream: TcpStream, state: Arc<State>, conn: &conns::Conn, idle_timeout: Duration) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(idle_timeout));
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut r = BufReader::with_capacity(64 * 1024, read_half);
    let mut w = stream;
    let mut scratch = binary::Scratch::default();
    loop {
        let mark = state.conns.idle(conn);
        let first = match r.fill_buf() {
            Ok([]) | Err(_) => return,
            Ok(buf) => buf[0],
        };
        if !state.conns.busy(conn, mark) {
            return;
        }
        let keep = if first == binary::REQUEST_MAGIC[0] {
            binary::handle(&mut r, &mut w, &state, &mut scratch)
        } else {
            http::handle(&mut r, &mut w, &state, http::Port::Data)
        };
        if !matches!(keep, Ok(true)) || state.closing.load(SeqCst) {
            return;
        }
    }
}

/// After SIGTERM: `delay` not ready but serving, then stop accepting and close idle
/// connections (busy ones close after their answer); `run` then drains.
fn stop_on_signal(listener: &TcpListener, state: &State, delay: Duration) {
    let signum = stop::wait();
    eprintln!(
        "cube-server: signal {signum}: not ready; stop accepting in {:.1} s",
        delay.as_secs_f64()
    );
    state.stopping.store(true, SeqCst);
    std::thread::sleep(delay);
    state.closing.store(true, SeqCst);
    stop::close_listener(listener);
    state.conns.close_idle();
}

/// The control port: HTTP only, one thread per connection, outside the data port's
/// connection limit (its one client is the agent, on loopback).
fn serve_control(listener: TcpListener, state: Arc<State>, idle_timeout: Duration) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let state = Arc::clone(&state);
        let spawned = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                let _ = stream.set_read_timeout(Some(idle_timeout));
                let Ok(read_half) = stream.try_clone() else {
                    return;
                };
                let mut r = BufReader::new(read_half);
                let mut w = stream;
                while matches!(r.fill_buf(), Ok(buf) if !buf.is_empty())
                    && matches!(
                        http::handle(&mut r, &mut w, &state, http::Port::Control),
                        Ok(true)
                    )
                {}
            });
        if let Err(e) = spawned {
            eprintln!("cube-server: cannot start a control connection thread: {e}");
        }
    }
}
