//! Open connections: at most `max` at once, idle ones closed after `idle_timeout`, and the
//! oldest idle one closed to make room for a new connection when the limit is reached.
//!
//! Without this, clients that open connections and leave them idle (or die without
//! closing them) use up the limit, and the server then refuses everyone, its own health
//! checks and its agent included. A connection is idle while its thread waits for the
//! next request; `idle_since` holds when that wait began (ms since the registry started,
//! plus 1), 0 while a request is being served, and EVICTED once the registry closed it.

use std::collections::HashMap;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Instant;

const BUSY: u64 = 0;
const EVICTED: u64 = u64::MAX;

pub struct Conn {
    id: u64,
    stream: TcpStream,
    idle_since: AtomicU64,
}

pub struct Conns {
    max: usize,
    started: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    pub evicted: AtomicU64,
}

impl Conns {
    pub fn new(max: usize) -> Conns {
        Conns {
            max,
            started: Instant::now(),
            next_id: AtomicU64::new(1),
            open: Mutex::new(HashMap::new()),
            evicted: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64 + 1
    }

    /// Register a new connection, closing the oldest idle one if the limit is reached;
    /// None (refuse it) when every open connection is serving a request.
    pub fn admit(&self, stream: &TcpStream) -> Option<Arc<Conn>> {
        let mut open = self.open.lock().unwrap();
        while open.len() >= self.max {
            let victim = open
                .values()
                .filter_map(|c| {
                    let t = c.idle_since.load(SeqCst);
                    (t != BUSY && t != EVICTED).then_some((t, c.id))
                })
                .min()?;
            let conn = &open[&victim.1];
            // Only if it is still idle since then: a request may have arrived meanwhile.
            if conn
                .idle_since
                .compare_exchange(victim.0, EVICTED, SeqCst, SeqCst)
                .is_ok()
            {
                let _ = conn.stream.shutdown(Shutdown::Both);
                open.remove(&victim.1);
                self.evicted.fetch_add(1, SeqCst);
            }
        }
        let conn = Arc::new(Conn {
            id: self.next_id.fetch_add(1, SeqCst),
            stream: stream.try_clone().ok()?,
            idle_since: AtomicU64::new(self.now()),
        });
        open.insert(conn.id, Arc::clone(&conn));
        Some(conn)
    }

    /// The connection waits for its next request; returns the mark to pass to `busy`.
    pub fn idle(&self, conn: &Conn) -> u64 {
        let t = self.now();
        conn.idle_since.store(t, SeqCst);
        t
    }

    /// A request arrived; false if the registry closed the connection meanwhile.
    pub fn busy(&self, conn: &Conn, mark: u64) -> bool {
        conn.idle_since
            .compare_exchange(mark, BUSY, SeqCst, SeqCst)
            .is_ok()
    }

    /// Close every idle connection (a stopping server); busy ones finish their request.
    pub fn close_idle(&self) {
        let mut open = self.open.lock().unwrap();
        open.retain(|_, conn| {
            let t = conn.idle_since.load(SeqCst);
            let closed = t != BUSY
                && t != EVICTED
                && conn
                    .idle_since
                    .compare_exchange(t, EVICTED, SeqCst, SeqCst)
                    .is_ok();
            if closed {
                let _ = conn.stream.shutdown(Shutdown::Both);
            }
            !closed
        });
    }

    pub fn leave(&self, conn: &Conn) {
        self.open.lock().unwrap().remove(&conn.id);
    }

    pub fn count(&self) -> usize {
        self.open.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        (client, listener.accept().unwrap().0)
    }

    #[test]
    fn the_oldest_idle_connection_makes_room_and_busy_ones_are_never_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let conns = Conns::new(2);
        let (_c1, s1) = pair(&listener);
        let (_c2, s2) = pair(&listener);
        let first = conns.admit(&s1).unwrap();
        let second = conns.admit(&s2).unwrap();
        let mark = conns.idle(&second);
        assert!(conns.busy(&first, conns.idle(&first))); // first serves a request
        let (_c3, s3) = pair(&listener);
        let third = conns.admit(&s3).expect("room made by closing the idle one");
        assert!(!conns.busy(&second, mark), "the idle one was closed");
        assert_eq!((conns.count(), conns.evicted.load(SeqCst)), (2, 1));
        assert!(conns.busy(&third, conns.idle(&third))); // a new one is idle until it asks
        let (_c4, s4) = pair(&listener);
        assert!(conns.admit(&s4).is_none(), "all busy: refused, none closed");
        conns.leave(&first);
        assert_eq!(conns.count(), 1);
    }
}
