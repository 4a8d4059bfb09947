//! Prometheus metrics (`GET /metrics`, OpenMetrics text) on prometheus-client, the official
//! Rust client. The names, labels and buckets are the metrics contract's
//! (images/common/elasticctr_common/metrics.py, `CUBE_SERVER`); a test reads them back from
//! the running server and checks them against it.
//!
//! The hot path touches only handles made once (an atomic add per counter, one short lock
//! per latency observation); the gauges are set from the held versions at each scrape.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PREFIX: &str = "elasticctr_cube_server";
/// Seek latency buckets, seconds (the contract's SEEK_BUCKETS).
const SEEK_BUCKETS: [f64; 12] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5,
];

type Labels = Vec<(&'static str, &'static str)>;

/// Which protocol a seek came in by.
#[derive(Clone, Copy)]
pub enum Protocol {
    Binary = 0,
    Http = 1,
}

const PROTOCOLS: [&str; 2] = ["binary", "http"];
/// How a background load ended.
const LOAD_RESULTS: [&str; 3] = ["loaded", "failed", "cancelled"];

/// A held version's slot.
pub const SLOTS: [&str; 2] = ["current", "background"];

/// What a held version looks like to a scrape.
#[derive(Default)]
pub struct Held {
    pub version: Option<u64>,
    pub keys: u64,
    pub bytes: u64,
}

/// What a scrape reads besides the counters.
pub struct Snapshot {
    pub slots: [Held; 2],
    pub ready: bool,
    pub connections: usize,
}

pub struct Metrics {
    registry: Registry,
    seeks: [Counter; 2],
    seek_seconds: [Histogram; 2],
    pub keys: Counter,
    pub missing: Counter,
    pub errors: Counter,
    loads: Family<Labels, Counter>,
    version: Family<Labels, Gauge>,
    held_keys: Family<Labels, Gauge>,
    mapped_bytes: Family<Labels, Gauge>,
    resident: Gauge,
    ready: Gauge,
    connections: Gauge,
}

fn seek_histogram() -> Histogram {
    Histogram::new(SEEK_BUCKETS)
}

fn labels(name: &'static str, value: &'static str) -> Labels {
    vec![(name, value)]
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = Registry::with_prefix(PREFIX);
        let seeks = Family::<Labels, Counter>::default();
        let seek_seconds = Family::<Labels, Histogram>::new_with_constructor(seek_histogram as _);
        let by_protocol = |p: &'static str| labels("protocol", p);
        let m = Metrics {
            seeks: PROTOCOLS.map(|p| seeks.get_or_create_owned(&by_protocol(p))),
            seek_seconds: PROTOCOLS.map(|p| seek_seconds.get_or_create_owned(&by_protocol(p))),
            keys: Counter::default(),
            missing: Counter::default(),
            errors: Counter::default(),
            loads: Family::default(),
            version: Family::default(),
            held_keys: Family::default(),
            mapped_bytes: Family::default(),
            resident: Gauge::default(),
            ready: Gauge::default(),
            connections: Gauge::default(),
            registry: Registry::default(),
        };
        // Counters are registered without `_total`: the client adds it.
        r.register("seeks", "seek requests, by protocol", seeks);
        r.register("seek_keys", "keys looked up by seeks", m.keys.clone());
        r.register(
            "seek_missing_keys",
            "looked-up keys the version does not hold",
            m.missing.clone(),
        );
        r.register(
            "errors",
            "requests answered with an error (seeks and control)",
            m.errors.clone(),
        );
        r.register(
            "seek_seconds",
            "time from a seek's request read to its answer written, by protocol",
            seek_seconds,
        );
        r.register(
            "version",
            "version held in each slot (-1: none)",
            m.version.clone(),
        );
        r.register(
            "keys",
            "keys in the held version's files (base and deltas), by slot",
            m.held_keys.clone(),
        );
        r.register(
            "mapped_bytes",
            "bytes of the held version's mapped files",
            m.mapped_bytes.clone(),
        );
        r.register(
            "resident_memory_bytes",
            "the process's resident memory",
            m.resident.clone(),
        );
        r.register(
            "ready",
            "1 when a version is switched in and the server is not stopping",
            m.ready.clone(),
        );
        r.register(
            "connections",
            "open data-port connections",
            m.connections.clone(),
        );
        r.register(
            "loads",
            "background loads finished, by result",
            m.loads.clone(),
        );
        for result in LOAD_RESULTS {
            // every series from the start, at 0
            drop(m.loads.get_or_create(&labels("result", result)));
        }
        Metrics { registry: r, ..m }
    }

    pub fn seek(&self, protocol: Protocol) {
        self.seeks[protocol as usize].inc();
    }

    pub fn seek_seconds(&self, protocol: Protocol, seconds: f64) {
        self.seek_seconds[protocol as usize].observe(seconds);
    }

    /// Seek requests, both protocols.
    pub fn seeks(&self) -> u64 {
        self.seeks.iter().map(Counter::get).sum()
    }

    /// A background load ended: one of LOAD_RESULTS.
    pub fn load(&self, result: &'static str) {
        self.loads.get_or_create(&labels("result", result)).inc();
    }

    /// The exposition, with the gauges set from `now`.
    pub fn render(&self, now: &Snapshot) -> String {
        for (slot, held) in SLOTS.iter().zip(&now.slots) {
            let l = labels("slot", slot);
            let version = held
                .version
                .map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX));
            self.version.get_or_create(&l).set(version);
            self.held_keys.get_or_create(&l).set(saturate(held.keys));
            self.mapped_bytes
                .get_or_create(&l)
                .set(saturate(held.bytes));
        }
        self.resident.set(saturate(resident_bytes()));
        self.ready.set(i64::from(now.ready));
        self.connections.set(saturate(now.connections as u64));
        let mut out = String::with_capacity(4096);
        encode(&mut out, &self.registry).expect("writing to a String does not fail");
        out
    }
}

fn saturate(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Resident set size from /proc/self/statm (0 where there is none).
fn resident_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}
