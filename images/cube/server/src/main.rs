//! cube-server's command line: parse the arguments, then `cube_server::server::run`.

use clap::{value_parser, Arg, ArgMatches, Command};
use cube_server::server::{run, Options};
use cube_server::state::Config;
use cube_server::stop;
use std::time::Duration;

fn command() -> Command {
    let arg = |name: &'static str, help: &'static str| Arg::new(name).long(name).help(help);
    Command::new("cube-server")
        .about("Serves one shard of the cube sparse-parameter table (docs/cube.md)")
        .arg(
            arg("shard", "this server's shard, 0 <= I < N")
                .value_name("I")
                .required(true)
                .value_parser(value_parser!(u32)),
        )
        .arg(
            arg("shard-num", "shards in all, N")
                .value_name("N")
                .required(true)
                .value_parser(value_parser!(u32).range(1..)),
        )
        .arg(arg("host", "data port's address").default_value("0.0.0.0"))
        .arg(
            arg("port", "data port: seeks (binary and HTTP), status")
                .default_value("8027")
                .value_parser(value_parser!(u16)),
        )
        .arg(
            arg(
                "control-host",
                "control port's address (the agent is on loopback)",
            )
            .default_value("127.0.0.1"),
        )
        .arg(
            arg("control-port", "control port: load, switch, unload")
                .default_value("8028")
                .value_parser(value_parser!(u16)),
        )
        .arg(
            arg("max-keys", "keys per request at most")
                .default_value("100000")
                .value_parser(value_parser!(usize)),
        )
        .arg(
            arg("max-connections", "open data connections at most")
                .default_value("1024")
                .value_parser(positive_count),
        )
        .arg(
            arg(
                "idle-timeout",
                "seconds before an idle connection is closed",
            )
            .default_value("120")
            .value_parser(seconds_above_zero),
        )
        .arg(
            arg(
                "shutdown-delay",
                "seconds not ready but serving after SIGTERM",
            )
            .default_value("0")
            .value_parser(seconds)
            .allow_negative_numbers(true),
        )
}

/// Seconds: a finite number >= 0.
fn seconds(value: &str) -> Result<Duration, String> {
    let s: f64 = value.parse().map_err(|e| format!("{e}"))?;
    Duration::try_from_secs_f64(s).map_err(|_| format!("{s} is not a number of seconds >= 0"))
}

fn seconds_above_zero(value: &str) -> Result<Duration, String> {
    seconds(value).and_then(|d| match d.is_zero() {
        true => Err("must be > 0 seconds".to_string()),
        false => Ok(d),
    })
}

fn positive_count(value: &str) -> Result<usize, String> {
    match value.parse::<usize>().map_err(|e| format!("{e}"))? {
        0 => Err("must be > 0".to_string()),
        n => Ok(n),
    }
}

/// An argument that is required or has a default: clap has checked and typed it.
fn value<T: Clone + Send + Sync + 'static>(m: &ArgMatches, name: &str) -> T {
    m.get_one::<T>(name)
        .cloned()
        .unwrap_or_else(|| panic!("--{name} is required or has a default"))
}

fn options(m: &ArgMatches) -> Result<Options, String> {
    let (shard, shard_num): (u32, u32) = (value(m, "shard"), value(m, "shard-num"));
    if shard >= shard_num {
        return Err(format!(
            "--shard {shard} is not below --shard-num {shard_num}: need 0 <= I < N"
        ));
    }
    Ok(Options {
        host: value(m, "host"),
        port: value(m, "port"),
        control_host: value(m, "control-host"),
        control_port: value(m, "control-port"),
        config: Config {
            shard,
            shard_num,
            max_keys: value(m, "max-keys"),
            max_connections: value(m, "max-connections"),
        },
        idle_timeout: value(m, "idle-timeout"),
        shutdown_delay: value(m, "shutdown-delay"),
    })
}

fn main() {
    if let Err(e) = stop::block_signals() {
        eprintln!("cube-server: cannot block SIGTERM for its thread: {e}");
        std::process::exit(1);
    }
    let mut cmd = command();
    let matches = cmd.get_matches_mut();
    let opts = options(&matches).unwrap_or_else(|msg| {
        cmd.error(clap::error::ErrorKind::ValueValidation, msg)
            .exit();
    });
    if let Err(e) = run(opts) {
        eprintln!("cube-server: {e}");
        std::process::exit(1);
    }
}
