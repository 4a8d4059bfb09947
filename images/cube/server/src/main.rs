//! cube-server: serves one shard of the cube sparse-parameter table.
//!
//! The data port carries both read protocols: a request starting with byte 0xCB is the
//! binary batch protocol (binary.rs), anything else is HTTP (http.rs). Version changes
//! (load, switch, unload) are on a second, control port, on loopback by default: the
//! shard's agent runs beside the server. One thread per connection.

mod b64;
mod binary;
mod conns;
mod http;
mod shardfile;
mod state;
mod stop;

use state::{Config, State};
use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::Duration;

/// How long a stopping server waits for the requests in flight: well inside Kubernetes'
/// default grace period of 30 s.
const DRAIN: Duration = Duration::from_secs(10);

const USAGE: &str = "usage: cube-server --shard I --shard-num N [--host 0.0.0.0] [--port 8027] \
[--control-host 127.0.0.1] [--control-port 8028] [--max-keys 100000] [--max-connections 1024] \
[--idle-timeout 120] [--shutdown-delay 0]";

struct Args {
    host: String,
    port: u16,
    control_host: String,
    control_port: u16,
    shard: u32,
    shard_num: u32,
    max_keys: usize,
    max_connections: usize,
    idle_timeout: f64,
    shutdown_delay: f64,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        host: "0.0.0.0".into(),
        port: 8027,
        control_host: "127.0.0.1".into(),
        control_port: 8028,
        shard: u32::MAX,
        shard_num: 0,
        max_keys: 100_000,
        max_connections: 1024,
        idle_timeout: 120.0,
        shutdown_delay: 0.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        if arg == "-h" || arg == "--help" {
            return Err(USAGE.into());
        }
        // --flag value, or --flag=value
        let (flag, value) = match arg.split_once('=') {
            Some((f, v)) => (f.to_string(), v.to_string()),
            None => {
                let v = it.next().ok_or(format!("{arg} needs a value\n{USAGE}"))?;
                (arg, v)
            }
        };
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value:?}: {e}\n{USAGE}");
        match flag.as_str() {
            "--host" => a.host = value.clone(),
            "--port" => a.port = value.parse().map_err(|e| bad(&e))?,
            "--control-host" => a.control_host = value.clone(),
            "--control-port" => a.control_port = value.parse().map_err(|e| bad(&e))?,
            "--shard" => a.shard = value.parse().map_err(|e| bad(&e))?,
            "--shard-num" => a.shard_num = value.parse().map_err(|e| bad(&e))?,
            "--max-keys" => a.max_keys = value.parse().map_err(|e| bad(&e))?,
            "--max-connections" => a.max_connections = value.parse().map_err(|e| bad(&e))?,
            "--idle-timeout" => a.idle_timeout = value.parse().map_err(|e| bad(&e))?,
            "--shutdown-delay" => a.shutdown_delay = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown option {flag}\n{USAGE}")),
        }
    }
    if !(a.shutdown_delay >= 0.0 && a.shutdown_delay.is_finite()) {
        return Err(format!("--shutdown-delay (seconds) must be >= 0\n{USAGE}"));
    }
    if a.max_connections == 0 || !(a.idle_timeout > 0.0 && a.idle_timeout.is_finite()) {
        return Err(format!(
            "--max-connections and --idle-timeout (seconds) must be > 0\n{USAGE}"
        ));
    }
    if a.shard_num == 0 || a.shard >= a.shard_num {
        return Err(format!(
            "need --shard I and --shard-num N with 0 <= I < N\n{USAGE}"
        ));
    }
    Ok(a)
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

/// After SIGTERM: `delay` seconds not ready but serving, then stop accepting and close
/// idle connections (busy ones close after their answer); the main thread then drains.
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

fn listen(host: &str, port: u16, what: &str) -> TcpListener {
    TcpListener::bind((host, port)).unwrap_or_else(|e| {
        eprintln!("cube-server: cannot listen on {host}:{port} ({what}): {e}");
        std::process::exit(1);
    })
}

fn main() {
    if let Err(e) = stop::block_signals() {
        eprintln!("cube-server: cannot block SIGTERM for its thread: {e}");
        std::process::exit(1);
    }
    let args = parse_args().unwrap_or_else(|msg| {
        eprintln!("{msg}");
        std::process::exit(2);
    });
    let listener = listen(&args.host, args.port, "data");
    let control = listen(&args.control_host, args.control_port, "control");
    let state = Arc::new(State::new(Config {
        shard: args.shard,
        shard_num: args.shard_num,
        max_keys: args.max_keys,
        max_connections: args.max_connections,
    }));
    let addr = listener
        .local_addr()
        .map_or(format!("{}:{}", args.host, args.port), |a| a.to_string());
    let control_addr = control.local_addr().map_or(
        format!("{}:{}", args.control_host, args.control_port),
        |a| a.to_string(),
    );
    eprintln!(
        "cube-server: shard {} of {} listening on {addr}, control on {control_addr} (no version loaded yet)",
        args.shard, args.shard_num
    );
    let idle_timeout = Duration::from_secs_f64(args.idle_timeout);
    {
        let state = Arc::clone(&state);
        std::thread::spawn(move || serve_control(control, state, idle_timeout));
    }
    let listener = Arc::new(listener);
    {
        let (listener, state) = (Arc::clone(&listener), Arc::clone(&state));
        let delay = Duration::from_secs_f64(args.shutdown_delay);
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
}
