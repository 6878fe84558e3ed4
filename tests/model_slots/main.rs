//! Exhaustive model check of a semaphore of P permits over N nodes with a quorum of q, with
//! `stateright`: the slot form (`src/take/slots.rs`, the default for P > 1: P slots, each a
//! mutex), and the counted form (one sorted set of at most P members per node,
//! `permit_acquire.lua`) as the negative control under a majority.
//!
//! What it mirrors, without time: each slot is taken as the mutex is (`SET NX` sent to every
//! node at once, each request arriving in any order; a guard once a quorum said yes; the
//! attempt rolled back on every node, behind its own request there, once a quorum can no
//! longer say yes; released on every node, behind its own requests, and no longer believed
//! held from the release's start). A request tries the slots in any order (the library's
//! rounds start at a random slot and try each), each attempt with a fresh holder value.
//! Timing (expiry, renewals, repair, the validity) is the mutex model's part
//! (`tests/model/`): a slot is one key's mutex there. What this model adds is the
//! composition: at most P clients believe they hold a permit at once, whatever the quorum,
//! because each holder believes it holds a distinct slot. The counted form under a majority
//! breaks it: each node admits P members and each holder needs only q nodes (the reason
//! `QuorumLock::semaphore(...).counted()` needs `Quorum::All`).

use stateright::{Model, Property};

#[path = "../common/model_check.rs"]
mod model_check;

/// How a semaphore keeps its permits on a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Form {
    /// P keys, each a mutex's entry: the slot form.
    Slots,
    /// One set of at most P members per node: the counted form.
    Counted,
}

#[derive(Clone, Debug)]
struct Semaphore {
    nodes: usize,
    quorum: usize,
    permits: usize,
    clients: usize,
    /// Attempts per client (each on any slot).
    attempts: u8,
    form: Form,
}

/// A client's state. Holder values are (client, attempt): unique per attempt.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Client {
    Idle {
        attempt: u8,
    },
    /// An attempt on `slot` (the counted form: slot 0): `sent` nodes its acquire has not
    /// reached yet, `yes` / `no` its answers.
    Trying {
        attempt: u8,
        slot: u8,
        sent: u8,
        yes: u8,
        no: u8,
    },
    Holding {
        attempt: u8,
        slot: u8,
        sent: u8,
    },
    /// Deleting its entries (a rollback or a release): `sent` nodes its acquire has not
    /// reached yet, `pending` nodes its delete has not reached yet.
    Giving {
        attempt: u8,
        slot: u8,
        sent: u8,
        pending: u8,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    /// Per node, per slot: the holder (client, attempt), or in the counted form, slot 0's
    /// members.
    nodes: Vec<Vec<Vec<(u8, u8)>>>,
    clients: Vec<Client>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Action {
    /// Client c starts an attempt on a slot.
    Start { c: usize, slot: u8 },
    /// Client c's acquire reaches node n.
    Arrive { c: usize, n: usize },
    /// Client c's delete (rollback or release) reaches node n.
    Delete { c: usize, n: usize },
    /// Client c starts its release.
    Release { c: usize },
}

fn bits(n: usize) -> u8 {
    ((1u16 << n) - 1) as u8
}

fn count(b: u8) -> usize {
    b.count_ones() as usize
}

impl Semaphore {
    fn holders(&self, s: &State) -> usize {
        s.clients
            .iter()
            .filter(|c| matches!(c, Client::Holding { .. }))
            .count()
    }

    /// No two clients believe they hold one slot (the slot form; the counted form's one
    /// "slot" is its set, held by up to P).
    fn slots_exclusive(&self, s: &State) -> bool {
        let mut seen = Vec::new();
        for c in &s.clients {
            if let Client::Holding { slot, .. } = c {
                if self.form == Form::Slots && seen.contains(slot) {
                    return false;
                }
                seen.push(*slot);
            }
        }
        true
    }

    /// The node's answer to (client, attempt)'s acquire on `slot`, and the node after it.
    fn take(&self, node: &mut [Vec<(u8, u8)>], slot: u8, who: (u8, u8)) -> bool {
        let entry = &mut node[slot as usize];
        match self.form {
            Form::Slots => match entry.first() {
                None => {
                    entry.push(who);
                    true
                }
                Some(h) => *h == who,
            },
            Form::Counted => {
                if entry.contains(&who) {
                    true
                } else if entry.len() < self.permits {
                    entry.push(who);
                    entry.sort();
                    true
                } else {
                    false
                }
            }
        }
    }
}

impl Model for Semaphore {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let slots = match self.form {
            Form::Slots => self.permits,
            Form::Counted => 1,
        };
        vec![State {
            nodes: vec![vec![Vec::new(); slots]; self.nodes],
            clients: vec![Client::Idle { attempt: 0 }; self.clients],
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (c, client) in s.clients.iter().enumerate() {
            match client {
                Client::Idle { attempt } if *attempt < self.attempts => {
                    let slots = match self.form {
                        Form::Slots => self.permits as u8,
                        Form::Counted => 1,
                    };
                    for slot in 0..slots {
                        actions.push(Action::Start { c, slot });
                    }
                }
                Client::Trying { sent, .. } | Client::Holding { sent, .. } => {
                    for n in 0..self.nodes {
                        if sent & (1 << n) != 0 {
                            actions.push(Action::Arrive { c, n });
                        }
                    }
                    if matches!(client, Client::Holding { .. }) {
                        actions.push(Action::Release { c });
                    }
                }
                Client::Giving { sent, pending, .. } => {
                    for n in 0..self.nodes {
                        if sent & (1 << n) != 0 {
                            actions.push(Action::Arrive { c, n });
                        } else if pending & (1 << n) != 0 {
                            // Behind its own acquire on the node's connection.
                            actions.push(Action::Delete { c, n });
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let all = bits(self.nodes);
        match action {
            Action::Start { c, slot } => {
                let Client::Idle { attempt } = s.clients[c] else {
                    return None;
                };
                s.clients[c] = Client::Trying {
                    attempt,
                    slot,
                    sent: all,
                    yes: 0,
                    no: 0,
                };
            }
            Action::Arrive { c, n } => {
                let who_of = |attempt: u8| (c as u8, attempt);
                match s.clients[c].clone() {
                    Client::Trying {
                        attempt,
                        slot,
                        sent,
                        mut yes,
                        mut no,
                    } => {
                        let sent = sent & !(1 << n);
                        if self.take(&mut s.nodes[n], slot, who_of(attempt)) {
                            yes |= 1 << n;
                        } else {
                            no |= 1 << n;
                        }
                        s.clients[c] = if count(yes) >= self.quorum {
                            Client::Holding {
                                attempt,
                                slot,
                                sent,
                            }
                        } else if count(no) > self.nodes - self.quorum {
                            // A failed attempt: rolled back on every node.
                            Client::Giving {
                                attempt,
                                slot,
                                sent,
                                pending: all,
                            }
                        } else {
                            Client::Trying {
                                attempt,
                                slot,
                                sent,
                                yes,
                                no,
                            }
                        };
                    }
                    Client::Holding {
                        attempt,
                        slot,
                        sent,
                    } => {
                        self.take(&mut s.nodes[n], slot, who_of(attempt));
                        s.clients[c] = Client::Holding {
                            attempt,
                            slot,
                            sent: sent & !(1 << n),
                        };
                    }
                    Client::Giving {
                        attempt,
                        slot,
                        sent,
                        pending,
                    } => {
                        self.take(&mut s.nodes[n], slot, who_of(attempt));
                        s.clients[c] = Client::Giving {
                            attempt,
                            slot,
                            sent: sent & !(1 << n),
                            pending,
                        };
                    }
                    _ => return None,
                }
            }
            Action::Delete { c, n } => {
                let Client::Giving {
                    attempt,
                    slot,
                    sent,
                    pending,
                } = s.clients[c].clone()
                else {
                    return None;
                };
                s.nodes[n][slot as usize].retain(|h| *h != (c as u8, attempt));
                let pending = pending & !(1 << n);
                s.clients[c] = match (sent, pending) {
                    (0, 0) => Client::Idle {
                        attempt: attempt + 1,
                    },
                    _ => Client::Giving {
                        attempt,
                        slot,
                        sent,
                        pending,
                    },
                };
            }
            Action::Release { c } => {
                let Client::Holding {
                    attempt,
                    slot,
                    sent,
                } = s.clients[c].clone()
                else {
                    return None;
                };
                s.clients[c] = Client::Giving {
                    attempt,
                    slot,
                    sent,
                    pending: all,
                };
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always("at most P hold", |m, s| m.holders(s) <= m.permits),
            Property::<Self>::always("one holder per slot", |m, s| m.slots_exclusive(s)),
            Property::<Self>::sometimes("every permit held", |m, s| m.holders(s) == m.permits),
        ]
    }
}

/// The path, one action per line.
fn narrate(
    _: &Semaphore,
    path: stateright::Path<State, Action>,
    _: Option<fn(&Semaphore, &State) -> bool>,
) -> Vec<String> {
    path.into_vec()
        .into_iter()
        .map(|(state, action)| format!("{action:?} -> clients {:?}", state.clients))
        .collect()
}

#[test]
fn slots_three_clients_two_permits_majority_of_3() {
    let model = Semaphore {
        nodes: 3,
        quorum: 2,
        permits: 2,
        clients: 3,
        attempts: 1,
        form: Form::Slots,
    };
    model_check::assert_safe("slots, 3 clients, 2 permits, 2 of 3", model, narrate);
}

/// Two attempts each (a round's second slot, a retry after a rollback): 8.4 M states, about
/// three minutes in a debug build.
#[test]
#[ignore = "a larger configuration (minutes): `-- --ignored`"]
fn slots_three_clients_two_permits_two_attempts_majority_of_3() {
    let model = Semaphore {
        nodes: 3,
        quorum: 2,
        permits: 2,
        clients: 3,
        attempts: 2,
        form: Form::Slots,
    };
    model_check::assert_safe(
        "slots, 3 clients x 2 attempts, 2 permits, 2 of 3",
        model,
        narrate,
    );
}

/// The counted form under all nodes: safe (what `counted()` requires).
#[test]
fn counted_three_clients_two_permits_all_of_3() {
    let model = Semaphore {
        nodes: 3,
        quorum: 3,
        permits: 2,
        clients: 3,
        attempts: 1,
        form: Form::Counted,
    };
    model_check::assert_safe("counted, 3 clients, 2 permits, 3 of 3", model, narrate);
}

/// Negative control: the counted form under a majority admits a third holder of two
/// permits (each node admits two; holders on nodes {0,1}, {1,2} and {0,2}).
#[test]
fn control_counted_under_a_majority_admits_too_many() {
    let model = Semaphore {
        nodes: 3,
        quorum: 2,
        permits: 2,
        clients: 3,
        attempts: 1,
        form: Form::Counted,
    };
    model_check::assert_finds(
        "control: counted, 3 clients, 2 permits, 2 of 3",
        model,
        "at most P hold",
        narrate,
    );
}
