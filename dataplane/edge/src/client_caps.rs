//! Connection caps per client IP address, shared by every worker: a client over its cap has its
//! new connections refused at accept, and the connections already served are not touched.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Open connections per address.
#[derive(Debug)]
pub struct PerIpCaps {
    max: u32,
    open: Mutex<HashMap<IpAddr, u32>>,
}

/// One open connection of an address; dropping it closes the count.
#[derive(Debug)]
pub struct IpGuard {
    caps: Arc<PerIpCaps>,
    ip: IpAddr,
}

impl PerIpCaps {
    pub fn new(max: u32) -> Arc<Self> {
        Arc::new(Self {
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Count a new connection of `ip`, or `None` when it already has `max` open.
    pub fn try_enter(self: &Arc<Self>, ip: IpAddr) -> Option<IpGuard> {
        let ip = canonical(ip);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(ip).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(IpGuard {
            caps: self.clone(),
            ip,
        })
    }

    /// Addresses with connections open now.
    #[cfg(test)]
    pub fn addresses(&self) -> usize {
        self.open.lock().map(|o| o.len()).unwrap_or(0)
    }
}

impl Drop for IpGuard {
    fn drop(&mut self) {
        let mut open = self.caps.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// An IPv4 client on a dual-stack socket arrives as `::ffff:a.b.c.d`: count it as `a.b.c.d`.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_has_its_own_cap_and_closing_frees_a_place() {
        let caps = PerIpCaps::new(2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = caps.try_enter(a).unwrap();
        let _a2 = caps.try_enter(a).unwrap();
        assert!(caps.try_enter(a).is_none(), "a third from one address");
        // The same address, mapped into IPv6, is the same client.
        assert!(caps.try_enter("::ffff:10.0.0.1".parse().unwrap()).is_none());
        let _b1 = caps.try_enter(b).unwrap();
        drop(a1);
        assert!(caps.try_enter(a).is_some());
        assert_eq!(caps.addresses(), 2);
    }

    #[test]
    fn an_address_with_nothing_open_is_forgotten() {
        let caps = PerIpCaps::new(1);
        for i in 0..100u8 {
            drop(caps.try_enter(IpAddr::from([10, 0, 0, i])).unwrap());
        }
        assert_eq!(
            caps.addresses(),
            0,
            "the map does not grow with addresses seen"
        );
    }
}
