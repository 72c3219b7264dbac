//! The guard that keeps user-supplied webhook URLs away from internal
//! addresses (loopback, private networks, link-local cloud metadata, ...),
//! unless the operator allows a network with `HOOKFLEET_ALLOWED_NETWORKS`.
//!
//! PITFALLS 3: a custom reqwest resolver is not consulted for IP-literal URLs,
//! so IP literals are checked here before sending, every resolved address is
//! filtered (after `to_canonical()`, so `::ffff:127.0.0.1` is 127.0.0.1), and
//! the HTTP client follows no redirects and ignores proxy settings.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, LazyLock};

use ipnet::IpNet;

use crate::error::ConfigError;

/// Parses one network in CIDR notation (a bare address is its own /32 or
/// /128); an IPv4-mapped IPv6 network is read as the IPv4 one.
pub(crate) fn parse_network(text: &str) -> Result<IpNet, ConfigError> {
    let text = text.trim();
    let bad = || {
        ConfigError(format!(
            "{text:?} is not a network (expected CIDR such as 10.0.0.0/8 or fd00::/8)"
        ))
    };
    let net = match text.parse::<IpNet>() {
        Ok(n) => n,
        Err(_) => IpNet::from(text.parse::<IpAddr>().map_err(|_| bad())?),
    };
    Ok(match (net.addr().to_canonical(), net) {
        (IpAddr::V4(v4), IpNet::V6(v6)) if v6.prefix_len() >= 96 => {
            IpNet::new(IpAddr::V4(v4), v6.prefix_len() - 96).map_err(|_| bad())?
        }
        _ => net.trunc(),
    })
}

/// Addresses no webhook may reach unless allowed: everything that is not
/// globally routable unicast (IANA's special-purpose registries, and the
/// cloud providers' metadata endpoints).
const INTERNAL: &[&str] = &[
    "0.0.0.0/8",         // "this network"
    "10.0.0.0/8",        // private
    "100.64.0.0/10",     // carrier-grade NAT (and Alibaba's metadata)
    "127.0.0.0/8",       // loopback
    "168.63.129.16/32",  // Azure's host endpoint (wire server)
    "169.254.0.0/16",    // link-local, cloud metadata
    "172.16.0.0/12",     // private
    "192.0.0.0/24",      // IETF protocol assignments
    "192.0.2.0/24",      // documentation
    "192.31.196.0/24",   // AS112
    "192.52.193.0/24",   // AMT
    "192.88.99.0/24",    // 6to4 relay anycast (deprecated)
    "192.168.0.0/16",    // private
    "192.175.48.0/24",   // AS112 direct delegation
    "198.18.0.0/15",     // benchmarking
    "198.51.100.0/24",   // documentation
    "203.0.113.0/24",    // documentation
    "224.0.0.0/4",       // multicast
    "240.0.0.0/4",       // reserved, broadcast
    "::/96",             // unspecified, loopback, IPv4-compatible (deprecated)
    "::ffff:0:0/96",     // IPv4-mapped (checked as IPv4 first)
    "::ffff:0:0:0/96",   // IPv4-translated
    "64:ff9b::/96",      // NAT64: reaches IPv4 inside
    "64:ff9b:1::/48",    // local-use NAT64
    "100::/64",          // discard
    "2001::/23",         // IETF protocol assignments (Teredo, ORCHID, …)
    "2001:db8::/32",     // documentation
    "2002::/16",         // 6to4: embeds IPv4
    "2620:4f:8000::/48", // AS112
    "3fff::/20",         // documentation
    "5f00::/16",         // segment routing
    "fc00::/7",          // unique local (and AWS's IPv6 metadata)
    "fe80::/10",         // link-local
    "fec0::/10",         // site-local (deprecated)
    "ff00::/8",          // multicast
];

/// The only IPv6 space handed out as global unicast: anything outside it
/// (reserved, or allocated since this list was written) is refused too.
const GLOBAL_UNICAST_V6: &str = "2000::/3";

static GLOBAL_UNICAST_V6_NET: LazyLock<IpNet> =
    LazyLock::new(|| GLOBAL_UNICAST_V6.parse().expect("a valid CIDR"));

static INTERNAL_NETS: LazyLock<Vec<IpNet>> = LazyLock::new(|| {
    INTERNAL
        .iter()
        .map(|n| n.parse().expect("the internal ranges are valid CIDRs"))
        .collect()
});

/// A destination the guard refused: which address, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Blocked {
    /// In a range no webhook may reach unless allowed (private, loopback,
    /// link-local and cloud metadata, documentation, multicast, …).
    #[error("destination {address} is an internal address ({range}); allow it with HOOKFLEET_ALLOWED_NETWORKS")]
    Internal { address: IpAddr, range: IpNet },
    /// An IPv6 address outside the only space handed out as global unicast.
    #[error("destination {address} is outside IPv6 global unicast ({GLOBAL_UNICAST_V6}); allow it with HOOKFLEET_ALLOWED_NETWORKS")]
    NotGlobalUnicast { address: IpAddr },
    /// A URL without a host.
    #[error("the URL has no host")]
    NoHost,
}

impl Blocked {
    /// The address refused (None for a URL without a host).
    pub fn address(&self) -> Option<IpAddr> {
        match self {
            Blocked::Internal { address, .. } | Blocked::NotGlobalUnicast { address } => {
                Some(*address)
            }
            Blocked::NoHost => None,
        }
    }
}

/// Which destinations webhooks may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkPolicy {
    allowed: Vec<IpNet>,
}

impl NetworkPolicy {
    /// Parses a comma-separated list of CIDRs (empty: only public addresses).
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let allowed = text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(parse_network)
            .collect::<Result<_, _>>()?;
        Ok(NetworkPolicy { allowed })
    }

    /// `Err` saying what was blocked and why when `ip` may not be reached.
    pub fn check(&self, ip: IpAddr) -> Result<(), Blocked> {
        let ip = ip.to_canonical();
        if self.allowed.iter().any(|c| c.contains(&ip)) {
            return Ok(());
        }
        if let Some(range) = INTERNAL_NETS.iter().find(|c| c.contains(&ip)) {
            return Err(Blocked::Internal {
                address: ip,
                range: *range,
            });
        }
        if ip.is_ipv6() && !GLOBAL_UNICAST_V6_NET.contains(&ip) {
            return Err(Blocked::NotGlobalUnicast { address: ip });
        }
        Ok(())
    }

    /// Checks a URL whose host is an IP literal (those never reach the
    /// resolver). Host names pass here and are checked when resolved.
    pub fn check_url(&self, url: &url::Url) -> Result<(), Blocked> {
        match url.host() {
            Some(url::Host::Ipv4(ip)) => self.check(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => self.check(IpAddr::V6(ip)),
            Some(url::Host::Domain(d))
                if d.eq_ignore_ascii_case("localhost") || d.ends_with(".localhost") =>
            {
                self.check(IpAddr::V4(Ipv4Addr::LOCALHOST))
            }
            Some(url::Host::Domain(_)) => Ok(()),
            None => Err(Blocked::NoHost),
        }
    }
}

/// A DNS resolver for reqwest that drops every address the policy refuses;
/// a name that resolves only to refused addresses fails to connect with the
/// reason.
#[derive(Debug, Clone)]
pub(crate) struct GuardedResolver {
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
                    Err(blocked) => refusal = Some(blocked),
                }
            }
            if allowed.is_empty() {
                return Err(match refusal {
                    Some(blocked) => blocked.into(),
                    None => format!("{host} did not resolve").into(),
                });
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
            "::7f00:1",
            "::a9fe:a9fe",
            "::ffff:0:a9fe:a9fe",
            "64:ff9b:1::a9fe:a9fe",
            "fec0::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "168.63.129.16",
            "fd00:ec2::254",
            // Outside 2000::/3, in no list above: reserved space.
            "4000::1",
            "c000::1",
            "1000::1",
        ] {
            assert!(p.check(ip(bad)).is_err(), "{bad} should be refused");
        }
        for good in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700::1111",
            "2a00:1450:4001::1",
        ] {
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
    fn a_mapped_network_is_read_as_ipv4() {
        assert_eq!(
            parse_network("::ffff:10.0.0.0/104").unwrap(),
            "10.0.0.0/8".parse::<IpNet>().unwrap()
        );
        assert_eq!(
            parse_network("10.1.2.3").unwrap(),
            "10.1.2.3/32".parse::<IpNet>().unwrap()
        );
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
