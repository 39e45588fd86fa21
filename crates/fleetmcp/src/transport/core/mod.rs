//! What every transport runs: [`driver`], where any transport's request becomes a running
//! call, and [`initialize`], which opens a session.

pub(super) mod driver;
pub(super) mod initialize;
