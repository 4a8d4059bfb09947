//! cube-server: serves one shard of the cube sparse-parameter table.
//!
//! The data port carries both read protocols: a request starting with byte 0xCB is the
//! binary batch protocol (binary.rs), anything else is HTTP (http.rs). Version changes
//! (load, switch, unload) are on a second, control port, on loopback by default: the
//! shard's agent runs beside the server. One thread per connection (server.rs).
//!
//! The binary (main.rs) only parses its arguments and calls `server::run`; the modules
//! are a library so that `cargo test` can drive them without sockets or processes.

pub mod binary;
pub mod conns;
pub mod dict;
pub mod http;
pub mod metrics;
pub mod server;
pub mod shardfile;
pub mod state;
pub mod stop;
