//! The fence on every worker write: the lease's token, still held (see [`fenced!`]).

use sqlx::Postgres;
use sqlx::postgres::PgArguments;

use crate::Lease;

/// The guard on every worker write: the same lease (token), still held, and the task
/// working or waiting for input its run asked for while holding it (see `held_input.rs`).
///
/// "Held" is written `lease_expires_at IS NOT NULL`, which the table's CHECK
/// (`tasks_lease_complete`) makes the same as `lease_owner IS NOT NULL`, so that the
/// planner cannot prove the predicate of `tasks_leased` and scan that index instead of
/// the primary key: between vacuums it holds an entry for every task claimed since
/// (dead, but each visited in the heap), and a finish batch planned over it took 27 ms
/// at 10k claims, growing until autovacuum came by; by the primary key it takes 2 ms.
///
/// A lease that lapsed is not checked here: every claim bumps the token, so a lapsed
/// lease that nobody claimed since is still the only one (after a database outage its
/// worker takes it back and goes on), and one that somebody claimed can never write
/// again. Expiry, rescue and cancellation all change the status, which fences them too.
macro_rules! fenced {
    () => {
        "tenant = $1 AND principal = $2 AND id = $3 AND lease_token = $4
         AND status IN ('working', 'input_required') AND lease_expires_at IS NOT NULL"
    };
}
pub(crate) use fenced;

/// Binds `$1..$4` of a [`fenced!`] statement: the lease's owner, task and token.
pub(crate) trait BindLease<'q>: Sized {
    fn bind_lease(self, lease: &'q Lease) -> Self;
}

macro_rules! impl_bind_lease {
    ($($ty:ty),*) => {$(
        impl<'q, O> BindLease<'q> for $ty {
            fn bind_lease(self, lease: &'q Lease) -> Self {
                self.bind(&lease.owner.tenant)
                    .bind(&lease.owner.principal)
                    .bind(lease.id.0)
                    .bind(lease.token)
            }
        }
    )*};
}

impl_bind_lease!(
    sqlx::query::QueryAs<'q, Postgres, O, PgArguments>,
    sqlx::query::QueryScalar<'q, Postgres, O, PgArguments>
);

impl<'q> BindLease<'q> for sqlx::query::Query<'q, Postgres, PgArguments> {
    fn bind_lease(self, lease: &'q Lease) -> Self {
        self.bind(&lease.owner.tenant)
            .bind(&lease.owner.principal)
            .bind(lease.id.0)
            .bind(lease.token)
    }
}
