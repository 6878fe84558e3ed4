//! Permutation test (loom) of the handshake that keeps a lease's later call from overtaking
//! its earlier calls' stragglers on a node (ordering invariant 4 in src/fanout/ordering.rs).
//!
//! A straggler is a request of an earlier call still on its way when the next call of the same
//! lease starts: it calls `may_send`, writes itself to the connection (its place in the
//! queue), then `written`; it may be re-sent after a dropped connection, which repeats the
//! three steps. The next call runs `stop`, and when that says a request may be on its way, it
//! waits for the stragglers to finish before writing itself. Loom runs every interleaving of
//! the two threads under the C11 memory model and checks that the next call's write always
//! comes after every write of the straggler. The code checked is the library's own
//! (`src/rules/progress.rs`, compiled here with loom's atomics).

use loom::sync::{Arc, Mutex};
use loom::thread;

mod progress {
    use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    include!("../src/rules/progress.rs");
}
use progress::Progress;

/// What reached the node's connection, in order.
type Wire = Arc<Mutex<Vec<&'static str>>>;

/// The straggler to node `slot`: up to `sends` attempts (a re-send after a dropped connection
/// repeats the handshake), each writing itself only when allowed.
fn straggler(progress: &Progress, wire: &Wire, slot: usize, sends: usize) {
    for _ in 0..sends {
        if !progress.may_send(slot) {
            return;
        }
        wire.lock().unwrap().push("straggler");
        progress.written(slot);
    }
}

/// Runs one straggler per node (`nodes` of them, each with `sends` attempts) against the next
/// call, in every interleaving, and checks that the next call is written last. (All nodes'
/// writes go to one list: the order that matters is per node, and one list is stricter.)
fn check(nodes: usize, sends: usize) {
    loom::model(move || {
        let progress = Arc::new(Progress::default());
        let wire: Wire = Arc::new(Mutex::new(Vec::new()));
        let tasks: Vec<_> = (0..nodes)
            .map(|slot| {
                let (progress, wire) = (progress.clone(), wire.clone());
                thread::spawn(move || straggler(&progress, &wire, slot, sends))
            })
            .collect();
        // The next call of the lease: waits for the stragglers when one may be on its way.
        if progress.stop() {
            for t in tasks {
                t.join().unwrap();
            }
            wire.lock().unwrap().push("next call");
        } else {
            wire.lock().unwrap().push("next call");
            for t in tasks {
                t.join().unwrap();
            }
        }
        let wire = wire.lock().unwrap();
        assert_eq!(
            wire.last(),
            Some(&"next call"),
            "a straggler was written after the next call: {wire:?}"
        );
    });
}

#[test]
fn a_straggler_is_never_written_after_the_next_call_of_its_lease() {
    check(1, 1);
}

#[test]
fn a_re_sent_straggler_is_never_written_after_the_next_call_of_its_lease() {
    check(1, 2);
}

#[test]
fn stragglers_to_two_nodes_are_never_written_after_the_next_call() {
    check(2, 1);
}

/// Negative control: a next call that does not look at the handshake's answer (sends at once)
/// is overtaken in some interleaving, and loom finds it.
#[test]
fn ignoring_the_handshake_lets_a_straggler_overtake() {
    let found = std::panic::catch_unwind(|| {
        loom::model(|| {
            let progress = Arc::new(Progress::default());
            let wire: Wire = Arc::new(Mutex::new(Vec::new()));
            let task = {
                let (progress, wire) = (progress.clone(), wire.clone());
                thread::spawn(move || straggler(&progress, &wire, 0, 1))
            };
            let _ = progress.stop();
            wire.lock().unwrap().push("next call");
            task.join().unwrap();
            assert_eq!(wire.lock().unwrap().last(), Some(&"next call"));
        });
    });
    assert!(
        found.is_err(),
        "loom should find the interleaving where the straggler lands last"
    );
}
