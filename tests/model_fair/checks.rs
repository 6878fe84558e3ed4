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

/// The path as readable lines, replayed on real states with each action's node translated
/// through the symmetry renamings so far (as `tests/model/` does), up to the first state
/// where `holds` is false, then that state's facts.
pub(super) fn narrate(
    model: &Protocol,
    path: Path<State, Action>,
    holds: Option<Condition>,
) -> Vec<String> {
    let mut lines = Vec::new();
    let clients: Vec<String> = (0..model.requests())
        .map(|r| {
            let plan = model.cfg.plans[r];
            let start = match plan.start {
                Start::Fresh => String::new(),
                Start::InLine(t) => format!(", in line with ticket {t}"),
                Start::Holding => format!(", holding until {}", plan.ttl),
            };
            format!("r{r}: client c{}, ttl {}{start}", plan.client, plan.ttl)
        })
        .collect();
    lines.push(format!(
        "requests: {}; claim window {}, queue lease {}",
        clients.join("; "),
        model.cfg.claim,
        model.cfg.queue_lease
    ));
    let steps = path.into_vec();
    // Every node starts alike, so the canonical initial state is the initial state.
    let mut real = steps[0].0;
    let mut to_real = [0, 1, 2, 3, 4];
    for (state, action) in steps {
        if holds.is_some_and(|holds| !holds(model, &real)) {
            break;
        }
        let Some(action) = action else { break };
        let r = |n: u8| to_real[usize::from(n)] as u8;
        let real_action = match action {
            Action::Process(c, n) => Action::Process(c, r(n)),
            Action::ProcessStale(c, n) => Action::ProcessStale(c, r(n)),
            Action::Reconnect(c, n) => Action::Reconnect(c, r(n)),
            Action::Lose(c, n) => Action::Lose(c, r(n)),
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
    for r in 0..model.requests() {
        let q = &s.reqs[r];
        if q.holds(s.now) {
            facts.push(format!("r{r} holds until {}", q.deadline));
        }
    }
    for n in 0..model.n() {
        facts.push(format!("n{n}: {}", describe_node(&s.nodes[n])));
    }
    format!("=> t={}: {}", s.now, facts.join("; "))
}
