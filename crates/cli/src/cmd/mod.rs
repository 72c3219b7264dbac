//! The commands, one file each (or a folder for a family: `webhook/`,
//! `delivery/`): each holds its flags and a short `run` that calls
//! `hookfleet_admin` and prints what happened; the tables and the escaping
//! of what a terminal would obey are `crate::table`'s.

pub mod console;
pub mod dead;
pub mod delivery;
pub mod migrate;
pub mod offline;
pub mod prune;
pub mod secrets;
pub mod stats;
pub mod webhook;
