//! Push: `subscriptions/listen` streams fed by LISTEN/NOTIFY across replicas.

pub(crate) mod hub;
pub(crate) mod listen;
pub(crate) mod streams;

pub use hub::HubConfig;
