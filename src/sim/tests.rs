//! Unit tests that need the module's insides: the verifier fed with faulty
//! histories, and faults injected into a running simulation.

use super::verify::Verifier;
use super::*;

/// Ids of real events, for feeding the verifier by hand.
fn ids(n: usize) -> Vec<EventId> {
    let mut sim = Simulation::new();
    (0..n).map(|_| sim.schedule(0, ())).collect()
}

#[test]
fn verifier_accepts_a_correct_history() {
    let id = ids(3);
    let mut v = Verifier::default();
    v.scheduled(0, 5);
    v.scheduled(1, 5);
    v.scheduled(2, 9);
    assert_eq!(v.check_run(id[0], 5, 0, 3), Ok(()));
    assert_eq!(v.check_run(id[1], 5, 0, 3), Ok(()));
    assert_eq!(v.check_run(id[2], 9, 0, 3), Ok(()));
}

#[test]
fn verifier_catches_time_going_backwards() {
    let id = ids(2);
    let mut v = Verifier::default();
    v.scheduled(0, 10);
    v.scheduled(1, 4);
    v.check_run(id[0], 10, 0, 2).unwrap();
    assert_eq!(
        v.check_run(id[1], 4, 0, 2),
        Err(SimError::TimeWentBackwards {
            id: id[1],
            time: 4,
            previous: 10
        })
    );
}

#[test]
fn verifier_catches_a_second_run_and_a_run_after_cancel() {
    let id = ids(2);
    let mut v = Verifier::default();
    v.scheduled(0, 1);
    v.scheduled(1, 1);
    v.check_run(id[0], 1, 0, 2).unwrap();
    assert_eq!(
        v.check_run(id[0], 1, 0, 2),
        Err(SimError::NotPending { id: id[0] })
    );
    v.cancelled(1);
    assert_eq!(
        v.check_run(id[1], 1, 0, 2),
        Err(SimError::NotPending { id: id[1] })
    );
}

#[test]
fn verifier_catches_an_early_or_late_run() {
    let id = ids(1);
    let mut v = Verifier::default();
    v.scheduled(0, 8);
    assert_eq!(
        v.check_run(id[0], 7, 0, 1),
        Err(SimError::WrongTime {
            id: id[0],
            scheduled: 8,
            time: 7
        })
    );
}

#[test]
fn verifier_checks_the_order_rule_within_a_time() {
    let id = ids(3);
    // id[1] (priority 5) was pending when id[0] (priority 0) was chosen:
    // running it second breaks the rule.
    let mut v = Verifier::default();
    v.scheduled(0, 3);
    v.scheduled(1, 3);
    v.check_run(id[0], 3, 0, 2).unwrap();
    assert_eq!(
        v.check_run(id[1], 3, 5, 2),
        Err(SimError::OutOfOrder {
            id: id[1],
            after: id[0]
        })
    );

    // Scheduled after id[0] was chosen (sequence 2 >= next_seq 2): allowed.
    let mut v = Verifier::default();
    v.scheduled(0, 3);
    v.scheduled(2, 3);
    v.check_run(id[0], 3, 0, 2).unwrap();
    assert_eq!(v.check_run(id[2], 3, 5, 3), Ok(()));
}

#[test]
fn verifying_run_stops_before_the_handler_of_a_faulty_event() {
    let mut sim = Simulation::builder().verify(true).build();
    let a = sim.schedule(1, 'a');
    sim.schedule(2, 'b');
    // Inject a fault: the verifier forgets that `a` is pending, as if it
    // had run already.
    sim.core
        .queue
        .verifier_mut()
        .unwrap()
        .cancelled(a.sequence());
    let mut ran = Vec::new();
    let result = sim.run(|_, ev| ran.push(ev));
    assert_eq!(result, Err(SimError::NotPending { id: a }));
    assert!(ran.is_empty(), "the handler must not run: {ran:?}");
    assert_eq!(sim.stats().events_run, 0);
    // The fault is not sticky: `b` is fine.
    assert_eq!(sim.run(|_, ev| ran.push(ev)).unwrap().events, 1);
    assert_eq!(ran, ['b']);
}

#[test]
fn verifying_run_reports_an_event_whose_record_says_another_time() {
    let mut sim = Simulation::builder().verify(true).build();
    let a = sim.schedule(5, ());
    // Inject a fault: the record claims `a` was scheduled for time 6.
    sim.core
        .queue
        .verifier_mut()
        .unwrap()
        .scheduled(a.sequence(), 6);
    assert_eq!(
        sim.step(|_, ()| {}),
        Err(SimError::WrongTime {
            id: a,
            scheduled: 6,
            time: 5
        })
    );
}

#[test]
fn ready_run_sorts_mixed_priorities_and_keeps_fifo() {
    let mut sim = Simulation::new();
    let order = [(0, 'a'), (3, 'b'), (0, 'c'), (3, 'd'), (-1, 'e'), (7, 'f')];
    for (priority, name) in order {
        sim.schedule_with_priority(4, priority, name);
    }
    let mut ran = Vec::new();
    assert_eq!(sim.run(|_, ev| ran.push(ev)).unwrap().events, 6);
    assert_eq!(ran, ['f', 'b', 'd', 'a', 'c', 'e']);
}
