//! What an HTTP/2 connection can hold at most, and the HTTP/2 limits derived from the memory
//! plan so that any client behaviour stays inside it (pure).
//!
//! An HTTP/1.1 connection holds one request at a time ([`CONNECTION_BYTES`]). An HTTP/2 one holds
//! its connection window of request DATA the handlers have not read yet, and up to
//! `max_concurrent_streams` streams, each with its decoded header list and its handler's state.
//! Each worker's connections share one budget in bytes ([`connection_budget_per_worker`]), of
//! which an HTTP/2 connection takes its worst case ([`http2_connection_bytes`]): the connection
//! cap is the budget, whatever the protocols. The HTTP/2 limits a client is told default to what
//! lets [`HTTP2_CONNECTIONS_PER_WORKER`] such connections fit a worker's budget
//! ([`http2_limits`]).

use super::CONNECTION_BYTES;

/// The HTTP/2 limits one connection is served with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Limits {
    pub max_concurrent_streams: u32,
    /// Bytes of a decoded header list (as HTTP/2 counts them: name, value and 32 per field).
    pub max_header_list_size: u64,
    pub stream_window: u64,
    pub connection_window: u64,
}

/// What one HTTP/2 stream holds besides its header list: its handler's state (a future of
/// about 15 KiB, the request and response heads' maps) and h2's stream state (16 KiB together),
/// and the read buffer of the origin connection a fill it causes reads into (64 KiB, the
/// proxy's `ORIGIN_READ_BUF`: an HTTP/1.1 connection's is in [`CONNECTION_BYTES`], but each
/// stream of an HTTP/2 connection may cause a fill of its own).
pub const HTTP2_STREAM_BYTES: u64 = 80 * 1024;

/// Copies of a stream's header list in memory: the decoded map (its fields' allocations and
/// the map's own entries, which the 32 bytes per field HTTP/2 counts do not cover) and the
/// request head forwarded to the origin.
pub const HEADER_LIST_COPIES: u64 = 3;

/// HTTP/2 connections at their worst case that the derived limits fit into one worker's
/// connection budget. More HTTP/2 connections than this are served while they fit the budget,
/// each charged its worst case.
pub const HTTP2_CONNECTIONS_PER_WORKER: u64 = 32;

/// Bounds of the derived limits: the largest are the protocol-friendly values served when
/// memory is plentiful (the defaults before they were derived); the smallest keep HTTP/2 usable.
pub const HTTP2_MAX_STREAMS: u32 = 128;
pub const HTTP2_MIN_STREAMS: u32 = 4;
pub const HTTP2_MAX_CONNECTION_WINDOW: u64 = 4 << 20;
pub const HTTP2_MAX_STREAM_WINDOW: u64 = 1 << 20;
/// The protocol's initial window, the least a window may be (RFC 9113 6.9.2).
pub const HTTP2_MIN_WINDOW: u64 = 65_535;
pub const HTTP2_MAX_HEADER_LIST: u64 = 32 * 1024;
pub const HTTP2_MIN_HEADER_LIST: u64 = 8 * 1024;

/// The most memory one HTTP/2 connection served with `l` can hold, whatever its client does:
/// the connection's own buffers and state ([`CONNECTION_BYTES`]), the header block being
/// received (up to one header list), the request DATA the window lets in (no more than the
/// connection window, nor than every stream's window together), and per stream its header
/// lists ([`HEADER_LIST_COPIES`]) and [`HTTP2_STREAM_BYTES`].
pub fn http2_connection_bytes(l: &Http2Limits) -> u64 {
    let streams = u64::from(l.max_concurrent_streams);
    let data = l
        .connection_window
        .min(streams.saturating_mul(l.stream_window));
    let per_stream = HTTP2_STREAM_BYTES
        .saturating_add(HEADER_LIST_COPIES.saturating_mul(l.max_header_list_size));
    CONNECTION_BYTES
        .saturating_add(l.max_header_list_size)
        .saturating_add(data)
        .saturating_add(streams.saturating_mul(per_stream))
}

/// The bytes all of a worker's connections may hold: `cap` HTTP/1.1 connections'
/// ([`CONNECTION_BYTES`] each). `cap` is `clients.maxConnectionsPerWorker`, or
/// [`super::connections_per_worker`] from the plan.
pub fn connection_budget_per_worker(cap: u64) -> u64 {
    cap.saturating_mul(CONNECTION_BYTES)
}

/// The HTTP/2 limits the configuration sets (the binary fills them from the config file's
/// `http2:`); 0 is derived from the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Http2Settings {
    pub max_concurrent_streams: u32,
    pub max_header_list_size: u64,
    pub stream_window: u64,
    pub connection_window: u64,
}

/// The HTTP/2 limits within a worker's connection `budget` (pure): each configured value (not 0)
/// as it is; the others derived so that [`HTTP2_CONNECTIONS_PER_WORKER`] connections fit at
/// their worst case. Of a connection's share, after its own buffers: a 64th for a header list
/// (8 to 32 KiB), a quarter of the rest for the connection window (64 KiB to 4 MiB), each
/// stream's window as large as the connection's (at most 1 MiB), and as many streams as the
/// rest holds (4 to 128).
pub fn http2_limits(budget: u64, configured: &Http2Settings) -> Http2Limits {
    let share = budget / HTTP2_CONNECTIONS_PER_WORKER;
    let header_list = match configured.max_header_list_size {
        0 => (share / 64).clamp(HTTP2_MIN_HEADER_LIST, HTTP2_MAX_HEADER_LIST),
        n => n,
    };
    let rest = share.saturating_sub(CONNECTION_BYTES + header_list);
    let connection_window = match configured.connection_window {
        0 => (rest / 4).clamp(HTTP2_MIN_WINDOW, HTTP2_MAX_CONNECTION_WINDOW),
        n => n,
    };
    let stream_window = match configured.stream_window {
        0 => connection_window.min(HTTP2_MAX_STREAM_WINDOW),
        n => n,
    };
    let max_concurrent_streams = match configured.max_concurrent_streams {
        0 => {
            let per_stream = HTTP2_STREAM_BYTES + HEADER_LIST_COPIES * header_list;
            let n = rest.saturating_sub(connection_window) / per_stream;
            u32::try_from(n)
                .unwrap_or(u32::MAX)
                .clamp(HTTP2_MIN_STREAMS, HTTP2_MAX_STREAMS)
        }
        n => n,
    };
    Http2Limits {
        max_concurrent_streams,
        max_header_list_size: header_list,
        stream_window,
        connection_window,
    }
}

/// The share of all workers' room for HTTP/2 connections one client address always gets: a
/// quarter, so that one address filling its share leaves the rest to others.
pub const HTTP2_PER_ADDRESS_DIVISOR: u64 = 4;

/// The part of a worker's connection `budget` an address past its share may fill (pure): all of
/// it but a quarter, kept for the connections of other addresses. The per-address share is
/// work-conserving: one address alone (a whole network behind one NAT, a proxy) may open more
/// HTTP/2 connections than its share while the worker has room, and a newcomer always finds the
/// reserved quarter (issue 31, section 1).
pub fn http2_borrowable(budget: u64) -> u64 {
    budget - budget / HTTP2_PER_ADDRESS_DIVISOR
}

/// HTTP/2 connections one client address may always have open at once, all workers together
/// (pure; past them it borrows, [`http2_borrowable`]):
/// [`HTTP2_PER_ADDRESS_DIVISOR`]th of those that fit the workers' budgets at `connection_bytes`
/// each, at least 1.
pub fn http2_connections_per_address(budget: u64, connection_bytes: u64, workers: usize) -> u32 {
    let fit = (budget / connection_bytes.max(1)).saturating_mul(workers.max(1) as u64);
    u32::try_from(fit / HTTP2_PER_ADDRESS_DIVISOR)
        .unwrap_or(u32::MAX)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::super::tests::cfg;
    use super::super::{connections_per_worker, plan_memory};
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn budget(limit: Option<u64>, workers: usize) -> u64 {
        let plan = plan_memory(limit, &cfg(None, None, 25), workers);
        connection_budget_per_worker(connections_per_worker(&plan))
    }

    #[test]
    fn an_address_past_its_share_may_fill_all_but_a_quarter_of_the_budget() {
        assert_eq!(http2_borrowable(34 * MIB), 34 * MIB - 34 * MIB / 4);
        assert_eq!(http2_borrowable(0), 0);
        assert_eq!(http2_borrowable(u64::MAX), u64::MAX - u64::MAX / 4);
    }

    #[test]
    fn a_connection_is_charged_its_windows_streams_and_header_lists() {
        let l = Http2Limits {
            max_concurrent_streams: 100,
            max_header_list_size: 32 * 1024,
            stream_window: MIB,
            connection_window: 4 * MIB,
        };
        // 4 MiB of DATA, 100 x (80 KiB + 3 x 32 KiB), one block being received.
        assert_eq!(
            http2_connection_bytes(&l),
            CONNECTION_BYTES + 32 * 1024 + 4 * MIB + 100 * (176 * 1024)
        );
        // The DATA held is bounded by the streams' windows together too.
        let few = Http2Limits {
            max_concurrent_streams: 2,
            stream_window: 65_535,
            ..l
        };
        assert_eq!(
            http2_connection_bytes(&few),
            CONNECTION_BYTES + 32 * 1024 + 2 * 65_535 + 2 * (176 * 1024)
        );
        // Far above an HTTP/1.1 connection: what the plan used to charge it.
        assert!(http2_connection_bytes(&l) > 100 * CONNECTION_BYTES);
        let huge = Http2Limits {
            max_concurrent_streams: u32::MAX,
            max_header_list_size: u64::MAX,
            ..l
        };
        assert_eq!(http2_connection_bytes(&huge), u64::MAX, "no overflow");
    }

    #[test]
    fn derived_limits_fit_their_connections_into_the_budget() {
        let defaults = Http2Settings::default();
        for (limit, workers) in [
            (Some(64 * MIB), 1),
            (Some(512 * MIB), 2),
            (Some(2 * GIB), 2),
            (Some(8 * GIB), 4),
            (Some(64 * GIB), 16),
            (None, 4),
        ] {
            let b = budget(limit, workers);
            let l = http2_limits(b, &defaults);
            let cost = http2_connection_bytes(&l);
            assert!(
                cost * HTTP2_CONNECTIONS_PER_WORKER <= b,
                "{limit:?}/{workers}: {l:?} costs {cost} of {b}"
            );
            assert!(l.connection_window >= HTTP2_MIN_WINDOW, "{l:?}");
            assert!(l.stream_window >= HTTP2_MIN_WINDOW, "{l:?}");
            assert!(l.max_concurrent_streams >= HTTP2_MIN_STREAMS, "{l:?}");
        }
    }

    #[test]
    fn limits_grow_with_the_plan_up_to_the_protocol_friendly_maximums() {
        let defaults = Http2Settings::default();
        let small = http2_limits(budget(Some(512 * MIB), 2), &defaults);
        let large = http2_limits(budget(Some(8 * GIB), 4), &defaults);
        let unlimited = http2_limits(budget(None, 4), &defaults);
        // 512 MiB: the least per-worker cap (256 connections of 136 KiB), a 32nd of it each
        // (1088 KiB): a 64th of that for a header list, a quarter of what is left after the
        // connection's 136 KiB and one list for the window, streams of 80 + 3 x 17 KiB in the
        // rest (701.25 KiB).
        let rest = 1088 * 1024 - (136 + 17) * 1024;
        assert_eq!(
            small,
            Http2Limits {
                max_concurrent_streams: 5,
                max_header_list_size: 17 * 1024,
                stream_window: rest / 4,
                connection_window: rest / 4,
            }
        );
        assert_eq!((rest - rest / 4) / (131 * 1024), 5);
        assert!(large.max_concurrent_streams > small.max_concurrent_streams);
        assert!(large.connection_window > small.connection_window);
        assert_eq!(
            unlimited,
            Http2Limits {
                max_concurrent_streams: HTTP2_MAX_STREAMS,
                max_header_list_size: HTTP2_MAX_HEADER_LIST,
                stream_window: HTTP2_MAX_STREAM_WINDOW,
                connection_window: HTTP2_MAX_CONNECTION_WINDOW,
            }
        );
    }

    #[test]
    fn configured_values_are_kept_and_the_rest_derived() {
        let cfg = Http2Settings {
            max_concurrent_streams: 16,
            connection_window: MIB,
            ..Http2Settings::default()
        };
        let b = budget(Some(512 * MIB), 2);
        let l = http2_limits(b, &cfg);
        assert_eq!(l.max_concurrent_streams, 16);
        assert_eq!(l.connection_window, MIB);
        assert_eq!(l.stream_window, MIB, "as large as the connection's");
        assert_eq!(l.max_header_list_size, 17 * 1024, "derived");
        assert_eq!(connection_budget_per_worker(3), 3 * CONNECTION_BYTES);
    }

    #[test]
    fn one_address_takes_a_quarter_of_the_room_for_http2_connections() {
        let b = budget(Some(512 * MIB), 2);
        let cost = http2_connection_bytes(&http2_limits(b, &Http2Settings::default()));
        // 33 fit each of the 2 workers: 66, a quarter of them.
        assert_eq!(b / cost, 33);
        assert_eq!(http2_connections_per_address(b, cost, 2), 16);
        assert_eq!(http2_connections_per_address(b, b, 1), 1, "at least one");
        // No division by zero: a cost of 0 counts as a byte, 0 workers as one.
        assert_eq!(
            u64::from(http2_connections_per_address(b, 0, 0)),
            b / HTTP2_PER_ADDRESS_DIVISOR
        );
    }
}
