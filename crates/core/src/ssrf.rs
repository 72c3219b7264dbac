//! The guard that keeps user-supplied webhook URLs away from internal
//! addresses (loopback, private networks, link-local cloud metadata, ...),
//! unless the operator allows a network with `HOOKFLEET_ALLOWED_NETWORKS`.
//!
//! PITFALLS 3: a custom reqwest resolver is not consulted for IP-literal URLs,
//! so IP literals are checked here before sending, every resolved address is
//! filtered (after `to_canonical()`, so `::ffff:127.0.0.1` is 127.0.0.1), and
//! the HTTP client follows no redirects and ignores proxy settings.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use crate::error::ConfigError;

/// An IP network in CIDR notation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let text = text.trim();
        let bad = || {
            ConfigError(format!(
                "{text:?} is not a network (expected CIDR such as 10.0.0.0/8 or fd00::/8)"
            ))
        };
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (
                a.parse::<IpAddr>().map_err(|_| bad())?,
                Some(p.parse::<u8>().map_err(|_| bad())?),
            ),
            None => (text.parse::<IpAddr>().map_err(|_| bad())?, None),
        };
        let addr = addr.to_canonical();
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        if prefix > max {
            return Err(bad());
        }
        Ok(Cidr {
            network: addr,
            prefix,
        })
    }

    const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Self {
        Cidr {
            network: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
            prefix,
        }
    }

    const fn v6(segments: [u16; 8], prefix: u8) -> Self {
        let [a, b, c, d, e, f, g, h] = segments;
        Cidr {
            network: IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h)),
            prefix,
        }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - self.prefix)
                };
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - self.prefix)
                };
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// Addresses no webhook may reach unless allowed: everything that is not the
/// public internet.
const INTERNAL: &[Cidr] = &[
    Cidr::v4(0, 0, 0, 0, 8),                         // "this network"
    Cidr::v4(10, 0, 0, 0, 8),                        // private
    Cidr::v4(100, 64, 0, 0, 10),                     // carrier-grade NAT
    Cidr::v4(127, 0, 0, 0, 8),                       // loopback
    Cidr::v4(169, 254, 0, 0, 16),                    // link-local, cloud metadata
    Cidr::v4(172, 16, 0, 0, 12),                     // private
    Cidr::v4(192, 0, 0, 0, 24),                      // IETF protocol assignments
    Cidr::v4(192, 0, 2, 0, 24),                      // documentation
    Cidr::v4(192, 168, 0, 0, 16),                    // private
    Cidr::v4(198, 18, 0, 0, 15),                     // benchmarking
    Cidr::v4(198, 51, 100, 0, 24),                   // documentation
    Cidr::v4(203, 0, 113, 0, 24),                    // documentation
    Cidr::v4(224, 0, 0, 0, 4),                       // multicast
    Cidr::v4(240, 0, 0, 0, 4),                       // reserved, broadcast
    Cidr::v6([0, 0, 0, 0, 0, 0, 0, 0], 128),         // unspecified
    Cidr::v6([0, 0, 0, 0, 0, 0, 0, 1], 128),         // loopback
    Cidr::v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96),  // NAT64: reaches IPv4 inside
    Cidr::v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64),      // discard
    Cidr::v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), // documentation
    Cidr::v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16),     // 6to4: embeds IPv4
    Cidr::v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),      // unique local
    Cidr::v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),     // link-local
    Cidr::v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),      // multicast
];

/// Which destinations webhooks may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkPolicy {
    allowed: Vec<Cidr>,
}

impl NetworkPolicy {
    /// Parses a comma-separated list of CIDRs (empty: only public addresses).
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let allowed = text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(Cidr::parse)
            .collect::<Result<_, _>>()?;
        Ok(NetworkPolicy { allowed })
    }

    /// Allows every address (for tests and trusted deployments only).
    pub fn allow_all() -> Self {
        NetworkPolicy {
            allowed: vec![Cidr::v4(0, 0, 0, 0, 0), Cidr::v6([0; 8], 0)],
        }
    }

    /// `Err` with a reason when `ip` may not be reached.
    pub fn check(&self, ip: IpAddr) -> Result<(), String> {
        let ip = ip.to_canonical();
        if self.allowed.iter().any(|c| c.contains(ip)) {
            return Ok(());
        }
        if let Some(range) = INTERNAL.iter().find(|c| c.contains(ip)) {
            return Err(format!(
                "destination {ip} is an internal address ({range}); allow it with HOOKFLEET_ALLOWED_NETWORKS"
            ));
        }
        Ok(())
    }

    /// Checks a URL whose host is an IP literal (those never reach the
    /// resolver). Host names pass here and are checked when resolved.
    pub fn check_url(&self, url: &url::Url) -> Result<(), String> {
        match url.host() {
            Some(url::Host::Ipv4(ip)) => self.check(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => self.check(IpAddr::V6(ip)),
            Some(url::Host::Domain(d))
                if d.eq_ignore_ascii_case("localhost") || d.ends_with(".localhost") =>
            {
                self.check(IpAddr::V4(Ipv4Addr::LOCALHOST))
            }
            Some(url::Host::Domain(_)) => Ok(()),
            None => Err("the URL has no host".into()),
        }
    }
}

/// A DNS resolver for reqwest that drops every address the policy refuses;
/// a name that resolves only to refused addresses fails to connect with the
/// reason.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    policy: Arc<NetworkPolicy>,
}

impl GuardedResolver {
    pub fn new(policy: Arc<NetworkPolicy>) -> Self {
        Self { policy }
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let resolved = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let mut allowed = Vec::new();
            let mut refusal = None;
            for addr in resolved {
                let ip = addr.ip().to_canonical();
                match policy.check(ip) {
                    Ok(()) => allowed.push(SocketAddr::new(ip, 0)),
                    Err(reason) => refusal = Some(reason),
                }
            }
            if allowed.is_empty() {
                let reason = refusal.unwrap_or_else(|| format!("{host} did not resolve"));
                return Err(reason.into());
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn internal_addresses_are_refused_by_default() {
        let p = NetworkPolicy::default();
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.20.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a00:1",
        ] {
            assert!(p.check(ip(bad)).is_err(), "{bad} should be refused");
        }
        for good in ["93.184.216.34", "1.1.1.1", "2606:4700::1111"] {
            assert!(p.check(ip(good)).is_ok(), "{good} should pass");
        }
    }

    #[test]
    fn allowed_networks_open_exactly_their_range() {
        let p = NetworkPolicy::parse("127.0.0.0/8, 10.0.0.5").unwrap();
        assert!(p.check(ip("127.0.0.1")).is_ok());
        assert!(p.check(ip("::ffff:127.0.0.1")).is_ok());
        assert!(p.check(ip("10.0.0.5")).is_ok());
        assert!(p.check(ip("10.0.0.6")).is_err());
        assert!(p.check(ip("192.168.0.1")).is_err());
    }

    #[test]
    fn bad_networks_are_refused() {
        assert!(NetworkPolicy::parse("10.0.0.0/33").is_err());
        assert!(NetworkPolicy::parse("intranet").is_err());
    }

    #[test]
    fn ip_literal_and_localhost_urls_are_checked() {
        let p = NetworkPolicy::default();
        assert!(p
            .check_url(&"http://127.0.0.1:8080/x".parse().unwrap())
            .is_err());
        assert!(p.check_url(&"http://[::1]/x".parse().unwrap()).is_err());
        assert!(p.check_url(&"http://localhost/x".parse().unwrap()).is_err());
        assert!(p
            .check_url(&"https://example.com/x".parse().unwrap())
            .is_ok());
    }
}
