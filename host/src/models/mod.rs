//! One model of each protocol's objects, for every side of the node that
//! speaks the protocol: a transport serving it and a peer client calling out
//! with it read and write the same types, so a field added, renamed or fixed
//! is fixed for both at once.
//!
//! A model is shaped by the wire, not by either side: it reads leniently
//! (members and enum names this node does not know are kept, so a client can
//! pass a newer peer's objects on unchanged) and offers the strict checks a
//! server applies on top of that read. It sits at the bottom of the layers,
//! so that both `peers` and `transports` can use it; it uses nothing of the
//! crate.

pub mod a2a;
