//! # hookfleet-template
//!
//! The template language of a webhook: Frappe's Jinja (body templates,
//! dynamic URLs, Jinja conditions) and Frappe's Python conditions, with
//! Frappe's `utils`, filters and Python methods, rendered in renderer
//! processes the operating system bounds. Request building in
//! `hookfleet-core` calls it through the [`hookfleet_core::request::Renderer`]
//! seam ([`Sandbox`]); only the binaries that render (the producer, the CLI
//! and its console) link it.
//!
//! A binary that renders calls [`serve_if_renderer`] first in `main`: the
//! renderer processes are that binary started again.
//!
//! # Layout
//! - [`sandbox`]: the renderer processes templates run in, under limits of
//!   time and memory the operating system enforces; [`Sandbox`], the
//!   [`hookfleet_core::request::Renderer`] that uses them.
//! - `confine`: what a renderer gives up before its first template (its
//!   inherited descriptors, new privileges, every system call rendering
//!   does not need).
//! - `jinja`: conditions, body templates and dynamic URLs compiled
//!   ([`Compiled`]) and rendered on one document, inside a renderer process
//!   only, under [`TEMPLATE_FUEL`] and [`RANGE_LIMIT`].
//! - `body`: a body template's values written as JSON for where they land
//!   (the rewrite of its `{{ … }}` by their position in the template's text).
//! - `pyexpr`: Frappe's Python conditions, checked and written as Jinja, one
//!   phase per file (lexer, AST, parser, emitter, refusals) and the Python
//!   operators the translations call at run time.
//! - `frappe`: Frappe's `utils`, filters and Python methods for templates,
//!   one family per file (argument binding, numbers, money, text, JSON,
//!   dates, date arithmetic), and the site's time zone ([`set_time_zone`]).

mod body;
mod confine;
mod frappe;
mod jinja;
mod names;
mod pyexpr;
pub mod sandbox;

pub use frappe::{parse_time_zone, set_time_zone};
pub use jinja::{Compiled, RANGE_LIMIT, TEMPLATE_FUEL};
pub use sandbox::{serve_if_renderer, use_program, Sandbox};

/// The settings only a binary that renders has (flattened into its
/// command line beside `hookfleet_settings::Settings`).
#[derive(Debug, Clone, clap::Args)]
pub struct TemplateSettings {
    /// The site's time zone (an IANA name such as Asia/Kolkata): what
    /// templates' `utils.now()`, `utils.nowdate()` and `utils.today()`
    /// answer in, as Frappe answers in its site's zone.
    #[arg(long, env = "HOOKFLEET_TIME_ZONE", default_value = "UTC", value_parser = parse_time_zone)]
    pub time_zone: chrono_tz::Tz,
}

impl TemplateSettings {
    /// Makes these settings this process's (and its renderers').
    pub fn install(&self) {
        set_time_zone(self.time_zone);
    }
}
