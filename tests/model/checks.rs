//! Running the checker: a configuration is safe, or a negative control is caught, with its
//! counterexample narrated.

use super::*;

// ---------------------------------------------------------------------------------------------
// Running the checker
// ---------------------------------------------------------------------------------------------

/// Explores every reachable state and asserts every property (`tests/common/model_check.rs`).
pub(super) fn assert_safe(name: &str, cfg: Config) {
    model_check::assert_safe(name, Protocol::new(cfg), narrate);
}

/// A negative control: the search must find a counterexample to `property`; prints it.
pub(super) fn assert_finds(name: &str, cfg: Config, property: &'static str) {
    model_check::assert_finds(name, Protocol::new(cfg), property, narrate);
}

/// The path as readable lines: the initial counters (if any), what each step did, and the
/// key facts of the first state where `holds` is false.
///
/// With the symmetry reduction, the path's states are representatives whose nodes were
/// renamed at every step; the path is replayed on real states, with each action's node
/// translated through the renamings so far, so that `n1` is the same node throughout.
pub(super) fn narrate(
    model: &Protocol,
    path: Path<State, Action>,
    holds: Option<Condition>,
) -> Vec<String> {
    let mut lines = Vec::new();
    let steps = path.into_vec();
    let mut real = steps[0].0;
    if real.nodes.iter().any(|n| n.counter > 0) {
        let counters: Vec<String> = (0..model.n())
            .map(|n| format!("n{n}={}", real.nodes[n].counter))
            .collect();
        lines.push(format!(
            "start: counters {} (largest token so far {})",
            counters.join(" "),
            real.max_token
        ));
    }
    // `to_real[i]`: the real name of the representative's node `i`.
    let mut to_real = [0, 1, 2, 3, 4];
    for (state, action) in steps {
        if holds.is_some_and(|holds| !holds(model, &real)) {
            break;
        }
        let Some(action) = action else { break };
        let r = |n: u8| to_real[usize::from(n)] as u8;
        let real_action = match action {
            Action::Process(c, n) => Action::Process(c, r(n)),
            Action::Lose(c, n) => Action::Lose(c, r(n)),
            Action::Redirect(c, n) => Action::Redirect(c, r(n)),
            Action::Skip(c, n) => Action::Skip(c, r(n)),
            Action::Answer(c, n) => Action::Answer(c, r(n)),
            Action::Restart(n) => Action::Restart(r(n)),
            Action::ClockJump(n, to) => Action::ClockJump(r(n), to),
            Action::Read(n) => Action::Read(r(n)),
            Action::Break(n) => Action::Break(r(n)),
            Action::Sync(n) => Action::Sync(r(n)),
            Action::Crash(n) => Action::Crash(r(n)),
            other => other,
        };
        let mut log = Log::on();
        model.step(&mut real, real_action, &mut log);
        lines.extend(log.lines);
        if model.cfg.symmetry {
            let mut next = state;
            model.step(&mut next, action, &mut Log::off());
            let order = model.canonicalize(&mut next);
            to_real = std::array::from_fn(|i| if i < model.n() { to_real[order[i]] } else { i });
        }
    }
    lines.push(summary(model, &real));
    lines
}

/// Who holds, and what every node has.
pub(super) fn summary(model: &Protocol, s: &State) -> String {
    let mut facts = Vec::new();
    for c in 0..model.clients() {
        let cl = &s.clients[c];
        if cl.holds(s.now) {
            let (holder, deadline) = (cl.holder(c), cl.deadline);
            let reads = if model.cfg.reads(c) { " (read)" } else { "" };
            facts.push(format!("c{c} holds {holder}{reads} until {deadline}"));
        }
    }
    for n in 0..model.n() {
        let node = &s.nodes[n];
        let leases: Vec<String> = leases(node)
            .into_iter()
            .map(|(name, expiry)| format!("{name} until {expiry}"))
            .collect();
        let entry = if leases.is_empty() {
            "-".to_string()
        } else {
            leases.join(", ")
        };
        if model.cfg.fencing.is_some() {
            facts.push(format!("n{n}: {entry}, counter {}", node.counter));
        } else {
            facts.push(format!("n{n}: {entry}"));
        }
    }
    format!("=> t={}: {}", s.now, facts.join("; "))
}
