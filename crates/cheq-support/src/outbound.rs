//! The one way a server fetches a URL that came from outside (PROTOCOL.md
//! §16.3): a discovery document or key set named by a registering RS or a
//! user's chosen CS, and whatever those documents name in turn.
//!
//! Every fetch is `https` (`http` only to a loopback host that the
//! operator's `allow_addresses` lets through), bounded ([`MAX_DOCUMENT`]
//! bytes, [`CONNECT_TIMEOUT`] to connect, [`TOTAL_TIMEOUT`] in all), follows
//! no redirect and uses no proxy. The address refusal is made on the address
//! connected to, not on the name: the client resolves names through
//! [`PolicyResolver`], which drops every refused address, so a name that
//! resolves to `127.0.0.1` or `169.254.169.254` is refused like the literal.
//! A literal address in the URL is checked before anything is sent.
//!
//! Refused unless allowed: loopback, private (RFC 1918, IPv6 unique local),
//! link-local, unspecified, shared (RFC 6598), multicast and broadcast
//! addresses, IPv4 addresses written as IPv6 included.

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use url::Url;

/// Longest answer read: a discovery document or a key set.
pub const MAX_DOCUMENT: usize = 64 * 1024;
/// Time to connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time for the whole request, the body read included.
pub const TOTAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a policy could not be built from the operator's list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("allow_addresses: \"{0}\" is neither an address nor a network (CIDR)")]
pub struct BadNetwork(pub String);

/// Which addresses may be fetched: every public address, and of the refused
/// kinds only the networks the operator listed (`allow_addresses`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    allowed: Vec<IpNet>,
}

impl AddressPolicy {
    /// From the operator's list: networks (`127.0.0.0/8`) or addresses.
    pub fn new<S: AsRef<str>>(allow: &[S]) -> Result<Self, BadNetwork> {
        let allowed = allow
            .iter()
            .map(|s| {
                let s = s.as_ref().trim();
                s.parse::<IpNet>()
                    .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| BadNetwork(s.to_owned()))
            })
            .collect::<Result<_, _>>()?;
        Ok(AddressPolicy { allowed })
    }

    /// Whether `ip` may be connected to.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        !is_refused_kind(ip) || self.allowed.iter().any(|n| n.contains(&ip))
    }

    /// Whether plain `http` may be used for `url`: only to a loopback host
    /// whose loopback address is allowed.
    fn permits_http(&self, url: &Url) -> bool {
        match url.host() {
            Some(url::Host::Domain(d)) if d.eq_ignore_ascii_case("localhost") => {
                self.permits(IpAddr::V4(Ipv4Addr::LOCALHOST))
                    || self.permits(IpAddr::V6(Ipv6Addr::LOCALHOST))
            }
            Some(url::Host::Ipv4(ip)) => ip.is_loopback() && self.permits(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback() && self.permits(IpAddr::V6(ip)),
            _ => false,
        }
    }
}

/// An IPv4 address carried in IPv6 is the IPv4 address: mapped
/// (`::ffff:a.b.c.d`), compatible (`::a.b.c.d`), translated (SIIT,
/// `::ffff:0:a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`, whose gateway connects
/// to the IPv4 address) and 6to4 (`2002:AABB:CCDD::`).
fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else {
        return ip;
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let v4 = |hi: u16, lo: u16| {
        IpAddr::V4(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        ))
    };
    let compatible = s[..6] == [0; 6] && !v6.is_loopback() && !v6.is_unspecified();
    let translated = s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0;
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    if compatible || translated || nat64 {
        return v4(s[6], s[7]);
    }
    if s[0] == 0x2002 {
        return v4(s[1], s[2]);
    }
    ip
}

/// The kinds of address refused by default.
fn is_refused_kind(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                // 0.0.0.0/8 ("this network"), 100.64.0.0/10 (shared),
                // 192.0.0.0/24 (protocol assignments), 198.18.0.0/15
                // (benchmarking), 240.0.0.0/4 (reserved).
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && v4.octets()[2] == 0)
                || (a == 198 && (b == 18 || b == 19))
                || a >= 240
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // fc00::/7 unique local, fe80::/10 link-local; the local
                // NAT64 prefix 64:ff9b:1::/48 (any IPv4 address may sit
                // anywhere in it) and Teredo 2001::/32 (a tunnel to an
                // address that cannot be checked here).
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || (first == 0x64 && v6.segments()[1] == 0xff9b && v6.segments()[2] == 1)
                || (first == 0x2001 && v6.segments()[1] == 0)
        }
    }
}

/// Why a fetch failed; each says what to fix, none carries a body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutboundError {
    #[error("{0} is not a valid URL")]
    BadUrl(String),
    #[error("{0} is not https (plain http only to an allowed loopback address)")]
    NotHttps(String),
    #[error("{0} resolves to an address this server does not fetch ({1})")]
    RefusedAddress(String, String),
    #[error("{0} could not be reached: {1}")]
    Unreachable(String, String),
    #[error("{0} did not answer in time")]
    Timeout(String),
    #[error("{0} answered more than {1} bytes")]
    TooLarge(String, usize),
    #[error("{0} answered with a redirect, which is not followed")]
    Redirected(String),
    #[error("{0} answered HTTP {1}")]
    Status(String, u16),
}

/// A resolver that keeps only the addresses the policy permits; a name
/// left with none is an error, so nothing is connected to.
#[derive(Debug, Clone)]
pub struct PolicyResolver {
    policy: AddressPolicy,
}

/// The refusal a [`PolicyResolver`] returns, found again in the error chain.
#[derive(Debug, thiserror::Error)]
#[error("every address of {name} is refused ({addresses})")]
struct Refused {
    name: String,
    addresses: String,
}

impl PolicyResolver {
    pub fn new(policy: AddressPolicy) -> Self {
        PolicyResolver { policy }
    }

    /// What is left of `addresses` for `name`, or the refusal.
    fn filter(
        &self,
        name: &str,
        addresses: Vec<SocketAddr>,
    ) -> Result<Vec<SocketAddr>, Box<dyn std::error::Error + Send + Sync>> {
        let kept: Vec<_> = addresses
            .iter()
            .copied()
            .filter(|a| self.policy.permits(a.ip()))
            .collect();
        if kept.is_empty() {
            let addresses = addresses
                .iter()
                .map(|a| a.ip().to_string())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(Box::new(Refused {
                name: name.to_owned(),
                addresses: if addresses.is_empty() {
                    "none".into()
                } else {
                    addresses
                },
            }));
        }
        Ok(kept)
    }
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let this = self.clone();
        let name = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let kept = this.filter(&name, found)?;
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

/// The client builder every outside fetch starts from: the policy's
/// resolver, no proxy, no redirect, the timeouts. Callers with their own
/// bounds (a resource server's CHEQ and decisions) may shorten them.
pub fn client_builder(policy: &AddressPolicy) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .dns_resolver(Arc::new(PolicyResolver::new(policy.clone())))
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(TOTAL_TIMEOUT)
}

/// One answer read in full.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
}

/// The fetcher of URLs that came from outside.
#[derive(Debug, Clone)]
pub struct Outbound {
    policy: AddressPolicy,
    client: reqwest::Client,
}

impl Outbound {
    pub fn new(policy: AddressPolicy) -> Result<Self, OutboundError> {
        let client = client_builder(&policy)
            .build()
            .map_err(|e| OutboundError::Unreachable("HTTP client".into(), e.to_string()))?;
        Ok(Outbound { policy, client })
    }

    /// The policy fetches are made under.
    pub fn policy(&self) -> &AddressPolicy {
        &self.policy
    }

    /// The client (for a caller that sends more than a `GET`); its
    /// requests are still under the policy, but [`Outbound::check`] the
    /// URL first.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Refuses a URL that may not be fetched before anything is sent: not
    /// `https` (or allowed loopback `http`), or a literal address refused.
    pub fn check(&self, url: &str) -> Result<Url, OutboundError> {
        let parsed = Url::parse(url).map_err(|_| OutboundError::BadUrl(url.to_owned()))?;
        if parsed.host().is_none() || !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(OutboundError::BadUrl(url.to_owned()));
        }
        match parsed.scheme() {
            "https" => {}
            "http" if self.policy.permits_http(&parsed) => {}
            _ => return Err(OutboundError::NotHttps(url.to_owned())),
        }
        let literal = match parsed.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        if let Some(ip) = literal.filter(|ip| !self.policy.permits(*ip)) {
            return Err(OutboundError::RefusedAddress(
                url.to_owned(),
                ip.to_string(),
            ));
        }
        Ok(parsed)
    }

    /// `GET url` with `Accept: accept`, read in full up to `limit` bytes
    /// (at most [`MAX_DOCUMENT`] unless the caller asks for less). Any
    /// status but 2xx is an error.
    pub async fn get(&self, url: &str, accept: &str) -> Result<Fetched, OutboundError> {
        let parsed = self.check(url)?;
        let request = self
            .client
            .get(parsed)
            .header(reqwest::header::ACCEPT, accept);
        self.read(url, request).await
    }

    /// Sends `request` (built on [`Outbound::client`] for a checked URL)
    /// and reads its answer as [`Outbound::get`] does.
    pub async fn read(
        &self,
        url: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<Fetched, OutboundError> {
        let mut res = request.send().await.map_err(|e| self.failed(url, e))?;
        let status = res.status();
        if status.is_redirection() {
            return Err(OutboundError::Redirected(url.to_owned()));
        }
        if !status.is_success() {
            return Err(OutboundError::Status(url.to_owned(), status.as_u16()));
        }
        let too_large = || OutboundError::TooLarge(url.to_owned(), MAX_DOCUMENT);
        if res
            .content_length()
            .is_some_and(|n| n > MAX_DOCUMENT as u64)
        {
            return Err(too_large());
        }
        let headers = res.headers().clone();
        let mut body = Vec::new();
        while let Some(chunk) = res.chunk().await.map_err(|e| self.failed(url, e))? {
            if body.len() + chunk.len() > MAX_DOCUMENT {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Fetched {
            status: status.as_u16(),
            headers,
            body,
        })
    }

    fn failed(&self, url: &str, e: reqwest::Error) -> OutboundError {
        if e.is_timeout() {
            return OutboundError::Timeout(url.to_owned());
        }
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(s) = source {
            if let Some(r) = s.downcast_ref::<Refused>() {
                return OutboundError::RefusedAddress(url.to_owned(), r.addresses.clone());
            }
            source = s.source();
        }
        OutboundError::Unreachable(url.to_owned(), e.without_url().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn refused_kinds_unless_allowed() {
        let none = AddressPolicy::default();
        for refused in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "100.64.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "64:ff9b::7f00:1",
            "64:ff9b:1::a00:1",
            "::ffff:0:a00:1",
            "2002:a00:1::1",
            "2002:a9fe:a9fe::",
            "2001:0:4136:e378::1",
            "192.0.0.1",
            "198.18.0.1",
            "198.19.255.1",
            "240.0.0.1",
        ] {
            assert!(!none.permits(ip(refused)), "{refused}");
        }
        for public in [
            "93.184.216.34",
            "2606:2800:220:1::1",
            "8.8.8.8",
            // Translated to a public address, it is that address.
            "64:ff9b::808:808",
            "2002:808:808::1",
            "192.0.2.1",
        ] {
            assert!(none.permits(ip(public)), "{public}");
        }
        let loopback = AddressPolicy::new(&["127.0.0.0/8", "::1"]).unwrap();
        assert!(loopback.permits(ip("127.0.0.5")));
        assert!(loopback.permits(ip("::ffff:127.0.0.1")));
        assert!(loopback.permits(ip("::1")));
        assert!(!loopback.permits(ip("169.254.169.254")));
        assert!(!loopback.permits(ip("10.0.0.1")));
    }

    #[test]
    fn a_bad_network_is_named() {
        assert_eq!(
            AddressPolicy::new(&["127.0.0.0/8", "nowhere"]),
            Err(BadNetwork("nowhere".into()))
        );
        assert!(AddressPolicy::new(&["10.0.0.0/33"]).is_err());
    }

    #[test]
    fn the_resolver_keeps_only_permitted_addresses() {
        let resolver = PolicyResolver::new(AddressPolicy::default());
        let a = |s: &str| SocketAddr::new(ip(s), 443);
        // A name that resolves to the metadata address alone is refused.
        let refused = resolver
            .filter("metadata.example", vec![a("169.254.169.254")])
            .unwrap_err();
        assert!(refused.to_string().contains("169.254.169.254"));
        assert!(resolver.filter("empty.example", vec![]).is_err());
        // Of a mixed answer only the public address is connected to.
        let kept = resolver
            .filter("mixed.example", vec![a("127.0.0.1"), a("93.184.216.34")])
            .unwrap();
        assert_eq!(kept, vec![a("93.184.216.34")]);
    }

    #[tokio::test]
    async fn urls_are_checked_before_anything_is_sent() {
        let none = Outbound::new(AddressPolicy::default()).unwrap();
        let loopback = Outbound::new(AddressPolicy::new(&["127.0.0.0/8"]).unwrap()).unwrap();
        assert!(matches!(
            none.check("http://example.com/x"),
            Err(OutboundError::NotHttps(_))
        ));
        assert!(matches!(
            none.check("http://127.0.0.1:1/x"),
            Err(OutboundError::NotHttps(_))
        ));
        assert!(matches!(
            none.check("https://127.0.0.1:1/x"),
            Err(OutboundError::RefusedAddress(..))
        ));
        assert!(matches!(
            none.check("https://[::ffff:a9fe:a9fe]/latest"),
            Err(OutboundError::RefusedAddress(..))
        ));
        assert!(matches!(
            none.check("ftp://example.com/x"),
            Err(OutboundError::NotHttps(_))
        ));
        assert!(matches!(
            none.check("https://user:pw@example.com/x"),
            Err(OutboundError::BadUrl(_))
        ));
        assert!(loopback.check("http://127.0.0.1:1/x").is_ok());
        assert!(loopback.check("http://localhost:1/x").is_ok());
        assert!(matches!(
            loopback.check("http://10.0.0.1/x"),
            Err(OutboundError::NotHttps(_))
        ));
        // localhost by name: refused on the address it resolves to.
        let err = none.get("https://localhost:9/x", "*/*").await.unwrap_err();
        assert!(matches!(err, OutboundError::RefusedAddress(..)), "{err:?}");
    }

    /// A one-shot server on loopback that answers `response`.
    fn serve(response: Vec<u8>, delay: Duration) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            if let Ok((mut s, _)) = listener.accept() {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                std::thread::sleep(delay);
                let _ = s.write_all(&response);
            }
        });
        format!("http://{addr}/doc")
    }

    fn answer(head: &str, body: &[u8]) -> Vec<u8> {
        let mut r = format!("{head}\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
        r.extend_from_slice(body);
        r
    }

    #[tokio::test]
    async fn answers_are_bounded_and_redirects_refused() {
        let out = Outbound::new(AddressPolicy::new(&["127.0.0.0/8"]).unwrap()).unwrap();
        let ok = serve(answer("HTTP/1.1 200 OK", b"{}"), Duration::ZERO);
        assert_eq!(out.get(&ok, "application/json").await.unwrap().body, b"{}");
        let big = serve(
            answer("HTTP/1.1 200 OK", &vec![b' '; MAX_DOCUMENT + 1]),
            Duration::ZERO,
        );
        assert!(matches!(
            out.get(&big, "*/*").await,
            Err(OutboundError::TooLarge(..))
        ));
        let moved = serve(
            answer("HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:1/", b""),
            Duration::ZERO,
        );
        assert!(matches!(
            out.get(&moved, "*/*").await,
            Err(OutboundError::Redirected(_))
        ));
        let missing = serve(answer("HTTP/1.1 404 Not Found", b""), Duration::ZERO);
        assert!(matches!(
            out.get(&missing, "*/*").await,
            Err(OutboundError::Status(_, 404))
        ));
    }
}
