"""The pure decision core: `transition(state, input) -> Transition`. No I/O, clock or randomness."""
