//! The site's time zone: what `now()` and its kin answer in and what offsets are converted
//! into, Frappe's system setting; one per process, passed to each renderer.

use std::sync::{PoisonError, RwLock};

use chrono_tz::Tz;

use super::signature::quote;

/// The environment variable the renderer process reads the site's time zone
/// from (an IANA name); the parent passes its own [`time_zone`] in it.
pub(crate) const TIME_ZONE_ENV: &str = "HOOKFLEET_TIME_ZONE";

/// The time zone `now()` and its kin answer in; UTC until [`set_time_zone`].
static TIME_ZONE: RwLock<Tz> = RwLock::new(Tz::UTC);

/// Reads an IANA time zone name (`UTC`, `Asia/Kolkata`), as the
/// `HOOKFLEET_TIME_ZONE` setting and the renderer do; surrounding whitespace
/// is ignored. The error names the zone and says what is expected.
pub fn parse_time_zone(name: &str) -> Result<Tz, String> {
    name.trim().parse::<Tz>().map_err(|_| {
        format!(
            "unknown time zone {}: use an IANA name such as UTC or Asia/Kolkata",
            quote(name)
        )
    })
}

/// Sets the process-wide time zone of `now()`, `nowdate()`, `today()`,
/// `nowtime()` and of offsets converted by the date helpers: Frappe's
/// system time zone.
pub fn set_time_zone(tz: Tz) {
    let mut zone = TIME_ZONE.write().unwrap_or_else(PoisonError::into_inner);
    *zone = tz;
}

/// The process-wide time zone (UTC unless [`set_time_zone`] was called).
pub(crate) fn time_zone() -> Tz {
    *TIME_ZONE.read().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frappe::testing::zone_guard;

    #[test]
    fn time_zone_setting() {
        assert_eq!(parse_time_zone("Asia/Kolkata"), Ok(Tz::Asia__Kolkata));
        assert_eq!(parse_time_zone(" UTC\n"), Ok(Tz::UTC));
        assert_eq!(
            parse_time_zone("Mars/Base"),
            Err(
                r#"unknown time zone "Mars/Base": use an IANA name such as UTC or Asia/Kolkata"#
                    .to_string()
            )
        );
        assert!(parse_time_zone("").is_err());
        let _guard = zone_guard();
        set_time_zone(Tz::Europe__Berlin);
        assert_eq!(time_zone(), Tz::Europe__Berlin);
        set_time_zone(Tz::UTC);
        assert_eq!(time_zone(), Tz::UTC);
    }
}
