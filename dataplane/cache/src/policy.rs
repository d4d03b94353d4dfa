//! HTTP caching policy: pure functions of (request, stored response, `now`, config).
