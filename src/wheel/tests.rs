use super::*;

#[test]
fn fires_on_deadline() {
    let mut w = Wheel::new();
    w.insert(5, 1);
    assert!(w.poll(4).is_none());
    assert_eq!(w.now(), 4);
    let e = w.poll(5).unwrap();
    assert_eq!((e.deadline, e.value), (5, 1));
}
