//! Running a model check, for `tests/model/` and `tests/model_fair/` alike: a configuration
//! explored in full with every property asserted, or a negative control that must find its
//! counterexample. Each model narrates its own paths.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::time::Instant;

use stateright::{Checker, Expectation, HasDiscoveries, Model, Path};

/// A model's narration of a path: readable lines, up to the first state where the condition
/// (an `always` property's) is false.
pub type Narrate<M> = fn(
    &M,
    Path<<M as Model>::State, <M as Model>::Action>,
    Option<fn(&M, &<M as Model>::State) -> bool>,
) -> Vec<String>;

/// Explores every reachable state and asserts every property: no counterexample to an
/// `always` or `eventually` property, an example for every `sometimes` one. A counterexample
/// is printed, narrated, before the assertion fails.
pub fn assert_safe<M>(name: &str, model: M, narrate: Narrate<M>)
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + Debug + 'static,
    M::Action: Clone + PartialEq + Debug,
{
    let started = Instant::now();
    let checker = model.checker().spawn_bfs().join();
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
pub fn assert_finds<M>(name: &str, model: M, property: &'static str, narrate: Narrate<M>)
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + Debug + 'static,
    M::Action: Clone + PartialEq + Debug,
{
    let started = Instant::now();
    let checker = model
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
