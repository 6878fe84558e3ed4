//! Running the checker: a configuration is safe, or a negative control is caught, with its
//! counterexample narrated.

#[allow(unused_imports)]
use super::*;

// ---------------------------------------------------------------------------------------------
// Running the checker
// ---------------------------------------------------------------------------------------------

/// Explores every reachable state and asserts every property: no counterexample to an
/// `always` or `eventually` property, an example for every `sometimes` one.
pub(super) fn assert_safe(name: &str, cfg: Config) {
    let started = Instant::now();
    let checker = Protocol::new(cfg).checker().spawn_bfs().join();
    println!(
        "{name}: {} states, {} transitions, depth {}, {:.1?}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    let model = checker.model();
    for (property, path) in checker.discoveries() {
        let p = model.property(property);
        if p.expectation.discovery_is_failure() {
            println!("COUNTEREXAMPLE to \"{property}\" in {name}:");
            let violated = (p.expectation == Expectation::Always).then_some(p.condition);
            for line in narrate(model, path, violated) {
                println!("  {line}");
            }
        }
    }
    checker.assert_properties();
}

/// A negative control: the search must find a counterexample to `property`; prints it.
pub(super) fn assert_finds(name: &str, cfg: Config, property: &'static str) {
    let started = Instant::now();
    let checker = Protocol::new(cfg)
        .checker()
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
        .spawn_bfs()
        .join();
    let path = checker
        .discovery(property)
        .unwrap_or_else(|| panic!("{name}: no counterexample to \"{property}\""));
    let model = checker.model();
    // An `always` property's trace ends where it first fails; an `eventually` one's runs to
    // the end of the path, where nothing more can happen.
    let p = model.property(property);
    let violated = (p.expectation == Expectation::Always).then_some(p.condition);
    let lines = narrate(model, path, violated);
    println!(
        "{name}: counterexample to \"{property}\" after {} states, {:.1?}:",
        checker.unique_state_count(),
        started.elapsed(),
    );
    for line in &lines {
        println!("  {line}");
    }
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
