//! A run session, kept by the program's origin node (where `halfproc run`
//! is connected): it puts the output of successive incarnations in order and
//! buffers the client's stdin for whichever node runs the program.
//!
//! Incarnation `g` runs on one node; when it migrates, `g + 1` starts on the
//! destination. Output of `g + 1` is held back until `g` has ended with
//! [`End::Migrated`] (after `g`'s node drained its pipes), so the client sees
//! the bytes in the order the program wrote them.

use crate::proto::{End, Exit, Msg, Stream};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use tokio::sync::{mpsc, watch};

/// Stdin as the node running the program pulls it.
#[derive(Debug)]
pub enum StdinChunk {
    Data(Vec<u8>),
    Eof,
}

enum Event {
    Output(Stream, Vec<u8>),
    End(End),
}

struct State {
    gen: u64,
    later: BTreeMap<u64, Vec<Event>>,
    stdin: VecDeque<u8>,
    /// Stream offset of `stdin[0]`.
    stdin_base: u64,
    stdin_eof: bool,
    done: bool,
    place: String,
}

/// See the module documentation.
pub struct Session {
    pub id: u64,
    pub program: String,
    client: mpsc::UnboundedSender<Msg>,
    state: Mutex<State>,
    stdin_seq: watch::Sender<u64>,
}

const STDIN_CHUNK: usize = 64 * 1024;
/// Stdin buffered at the origin beyond which the client is not read
/// (TCP backpressure then stops `halfproc run` from reading its stdin).
pub const STDIN_BUFFER: usize = 4 << 20;

impl Session {
    /// A session whose messages for the client go to `client`.
    pub fn new(id: u64, program: String, client: mpsc::UnboundedSender<Msg>) -> Session {
        Session {
            id,
            program,
            client,
            state: Mutex::new(State {
                gen: 0,
                later: BTreeMap::new(),
                stdin: VecDeque::new(),
                stdin_base: 0,
                stdin_eof: false,
                done: false,
                place: "here".into(),
            }),
            stdin_seq: watch::Sender::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Output of incarnation `gen`.
    pub fn output(&self, gen: u64, stream: Stream, data: Vec<u8>) {
        self.event(gen, Event::Output(stream, data));
    }

    /// Incarnation `gen` ended.
    pub fn end(&self, gen: u64, end: End) {
        self.event(gen, Event::End(end));
    }

    /// Where the current incarnation runs (for `ps`).
    pub fn set_place(&self, gen: u64, place: String) {
        let mut s = self.lock();
        if gen >= s.gen {
            s.place = place;
        }
    }

    /// (current place, finished).
    pub fn place(&self) -> (String, bool) {
        let s = self.lock();
        (s.place.clone(), s.done)
    }

    fn event(&self, gen: u64, ev: Event) {
        let mut s = self.lock();
        if s.done || gen < s.gen {
            return;
        }
        s.later.entry(gen).or_default().push(ev);
        // Deliver the current incarnation's events; after its Migrated, the
        // next one's (held back until now), and so on.
        loop {
            let cur = s.gen;
            let Some(evs) = s.later.remove(&cur) else {
                break;
            };
            for ev in evs {
                // Nothing follows an End of the same incarnation.
                if s.gen == cur && !s.done {
                    self.deliver(&mut s, ev);
                }
            }
            if s.done || s.gen == cur {
                break;
            }
        }
    }

    fn deliver(&self, s: &mut State, ev: Event) {
        match ev {
            Event::Output(stream, data) => {
                let _ = self.client.send(Msg::Output { stream, data });
            }
            Event::End(End::Migrated) => s.gen += 1,
            Event::End(End::Exited(exit)) => {
                s.done = true;
                self.stdin_seq.send_modify(|n| *n += 1);
                let _ = self.client.send(Msg::Exited(exit));
            }
        }
    }

    /// The program is gone (its node's connection dropped, ...).
    pub fn lost(&self, gen: u64, why: String) {
        self.end(gen, End::Exited(Exit::Lost(why)));
    }

    /// Stdin bytes from the client.
    pub fn push_stdin(&self, data: &[u8]) {
        self.lock().stdin.extend(data);
        self.stdin_seq.send_modify(|n| *n += 1);
    }

    /// Waits until fewer than [`STDIN_BUFFER`] bytes of stdin are buffered.
    pub async fn stdin_room(&self) {
        let mut seq = self.stdin_seq.subscribe();
        loop {
            {
                let s = self.lock();
                if s.stdin.len() < STDIN_BUFFER || s.done {
                    return;
                }
            }
            if seq.changed().await.is_err() {
                return;
            }
        }
    }

    /// The client's stdin ended.
    pub fn stdin_eof(&self) {
        self.lock().stdin_eof = true;
        self.stdin_seq.send_modify(|n| *n += 1);
    }

    /// Stdin from stream offset `offset` on: waits until some is there.
    /// Everything before `offset` is in the program's pipe or consumed, so
    /// it is dropped here.
    pub async fn stdin(&self, offset: u64) -> Result<StdinChunk, String> {
        let mut seq = self.stdin_seq.subscribe();
        loop {
            {
                let mut s = self.lock();
                if offset < s.stdin_base {
                    return Err(format!(
                        "stdin offset {offset} requested, buffer starts at {}",
                        s.stdin_base
                    ));
                }
                let drop = ((offset - s.stdin_base) as usize).min(s.stdin.len());
                s.stdin.drain(..drop);
                s.stdin_base += drop as u64;
                if drop > 0 {
                    // Room for the client (see `stdin_room`).
                    self.stdin_seq.send_modify(|n| *n += 1);
                }
                if s.stdin_base == offset && !s.stdin.is_empty() {
                    // Handed out but kept: a node that dies or migrates before
                    // writing them asks again from the same offset.
                    let n = s.stdin.len().min(STDIN_CHUNK);
                    return Ok(StdinChunk::Data(s.stdin.range(..n).copied().collect()));
                }
                if s.stdin_eof && s.stdin_base + s.stdin.len() as u64 <= offset {
                    return Ok(StdinChunk::Eof);
                }
            }
            if seq.changed().await.is_err() {
                return Ok(StdinChunk::Eof);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(rx: &mut mpsc::UnboundedReceiver<Msg>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(m) = rx.try_recv() {
            out.push(match m {
                Msg::Output { stream, data } => {
                    format!("{stream}:{}", String::from_utf8_lossy(&data))
                }
                Msg::Exited(e) => format!("exit {}", e.code()),
                other => format!("{other:?}"),
            });
        }
        out
    }

    #[test]
    fn next_incarnation_waits_for_the_previous_to_end() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let s = Session::new(1, "p".into(), tx);
        s.output(1, 1, b"B".to_vec()); // the copy is faster than the drain
        s.output(0, 1, b"A".to_vec());
        s.output(2, 2, b"C".to_vec());
        assert_eq!(drain(&mut rx), ["1:A"]);
        s.end(0, End::Migrated);
        assert_eq!(drain(&mut rx), ["1:B"]);
        s.output(0, 1, b"stale".to_vec());
        s.end(1, End::Migrated);
        assert_eq!(drain(&mut rx), ["2:C"]);
        s.end(2, End::Exited(Exit::Signal(9)));
        s.output(2, 1, b"after the end".to_vec());
        assert_eq!(drain(&mut rx), ["exit 137"]);
        assert!(s.place().1);
    }

    #[tokio::test]
    async fn stdin_is_kept_until_asked_past() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let s = Session::new(1, "p".into(), tx);
        s.push_stdin(b"hello world");
        let data = |c: Result<StdinChunk, String>| match c {
            Ok(StdinChunk::Data(d)) => String::from_utf8(d).unwrap(),
            other => panic!("{other:?}"),
        };
        assert_eq!(data(s.stdin(0).await), "hello world");
        // Asked again from the same offset (a migration in between): same bytes.
        assert_eq!(data(s.stdin(0).await), "hello world");
        assert_eq!(data(s.stdin(5).await), " world");
        s.stdin_eof();
        assert!(matches!(s.stdin(11).await, Ok(StdinChunk::Eof)));
        assert!(s.stdin(3).await.is_err(), "offset before what was dropped");
    }

    #[tokio::test]
    async fn a_full_stdin_buffer_holds_the_client_back() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let s = std::sync::Arc::new(Session::new(1, "p".into(), tx));
        s.push_stdin(&vec![7u8; STDIN_BUFFER]);
        let wait = tokio::time::timeout(std::time::Duration::from_millis(50), s.stdin_room());
        assert!(wait.await.is_err(), "room reported with a full buffer");
        let s2 = s.clone();
        let room = tokio::spawn(async move { s2.stdin_room().await });
        tokio::task::yield_now().await;
        // The node wrote 1 MiB into the pipe and asks for more.
        let _ = s.stdin(1 << 20).await;
        tokio::time::timeout(std::time::Duration::from_secs(5), room)
            .await
            .expect("no room after the node consumed stdin")
            .unwrap();
    }
}
