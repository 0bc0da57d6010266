vcl 4.1;
# Varnish (7.x) as a caching CDN in front of Sluice, the counterpart of deploy/nginx.conf.
#
# bench/cdn/ (`npm run bench:cdn`) runs this exact file: it replaces only the origin's address.
# Start varnishd with a listen queue deep enough for a reconnect storm (`-p listen_depth=4096`), an
# open-file limit above the number of clients (each client's connection is a descriptor of the one
# varnishd process), and few worker threads with a deep queue (`-p thread_pool_min=50
# -p thread_pool_max=100 -p thread_queue_limit=100000`): requests parked on a waiting list hold no
# thread, and thousands of threads woken for one write cost several times the CPU of a hundred taking
# turns. Raise thread_pool_max with the number of shapes followed at once: each shape's live request
# parked at the origin holds one thread. docs/cdn.md has the whole command line and the figures behind it.
#
# What makes it work (docs/protocol.md §4.4, §5.2): every shape response carries cache-control, the cache key
# is the whole request URL, and live URLs change with `cursor` every long-poll window. Varnish parks every
# request for a URL that is being fetched on that object's waiting list and wakes them the moment the
# response arrives, so clients following a shape cost the origin about one request per URL.

backend sluice {
  .host = "127.0.0.1";
  .port = "3000";
  # A live request is held up to --long-poll-timeout (20 s) and an SSE stream up to a minute.
  .first_byte_timeout = 90s;
  .between_bytes_timeout = 90s;
}

sub vcl_recv {
  # /metrics has no authentication: keep it off the public path.
  if (req.url ~ "^/metrics") {
    return (synth(404, "Not found"));
  }
  if (req.url ~ "^/v1/shape" && (req.method == "GET" || req.method == "HEAD")) {
    # SSE (live_sse with any value but `false`, or the old experimental_live_sse=true|1): streamed, uncached.
    if (req.url ~ "[?&]live_sse(=(?!false(&|$))|&|$)" || req.url ~ "[?&]experimental_live_sse=(true|1)(&|$)") {
      return (pass);
    }
    # Sluice ignores cookies, and Varnish's built-in logic would not cache a request that has one (a
    # browser sends the site's cookies with every request). Authentication is in the URL (secret=) or
    # in front of the cache.
    unset req.http.Cookie;
    # The key is the whole URL with its query string (the built-in vcl_hash: URL and Host).
    return (hash);
  }
}

# No vcl_backend_response: Varnish reads s-maxage/max-age into the TTL and stale-while-revalidate into
# grace (a stale shape answer is still correct: the client continues from the offset it names), and
# turns no-store errors into hit-for-miss objects, which are never served and never make requests wait.
