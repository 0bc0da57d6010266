/*
 * The CDN benchmark's clients in C: N shape clients on one epoll loop, each on its own keep-alive
 * HTTP/1.1 socket, following docs/protocol.md exactly as clients.ts's JavaScript clients do
 * (offset=-1, the offsets given until electric-up-to-date, then live=true long-polls with handle,
 * offset and cursor, the query parameters always in the same order). The Node clients cost about
 * 40 us of CPU per response here, on the same 2 cores as the cache they measure; these cost a
 * fraction of that, so the cache, not the load generator, decides when the last client has a write.
 *
 * Usage: epoll-clients HOST PORT LOCAL_ADDRESS CLIENTS SYNC_CONCURRENCY TABLE
 * Starts at once; prints one JSON line when every client is up to date ({"event":"synced",...}).
 * Then answers commands on stdin, one JSON line each on stdout:
 *   measure RUN      -> {}                   changes stamped RUN:<ns> are recorded from now on
 *   count STAMP      -> {"count":n}          clients holding that write
 *   receipts         -> {"STAMP":[ms,...]}   per write, each client's latency (arrival - stamp)
 *   status           -> {...}                counters
 *   stop             -> {...}                counters, then exit
 * A write is recorded when a client holds the whole response whose body has "stamp":"RUN:<ns>":
 * CLOCK_MONOTONIC at that moment minus <ns> (the writer stamps with the same clock).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RETRY_NS 100000000LL
#define MAX_STAMPS 256
#define MAX_STATUS 600

typedef struct {
  int fd;
  int live;
  int synced;
  int in_sync_slot;
  int connected;
  char handle[160];
  char offset[64];
  char cursor[64];
  char *buf;
  size_t len, cap;
  long long retry_at; /* 0: none */
  long long t0;
} client;

static client *clients;
static int nclients, sync_concurrency, epfd;
static const char *table;
static struct sockaddr_in server, local;
static int have_local;
static int in_sync, next_to_start, synced_count;
static long long start_ns;
static double *sync_ms;
static long long current_run = -1;
static long long stamps[MAX_STAMPS];
static double *receipts[MAX_STAMPS];
static int receipt_n[MAX_STAMPS];
static int nstamps;
static long long requests, live_requests, live_with_data, errors, conflicts, other_status, sync_bytes;
static long long statuses[MAX_STATUS];
static long long err_reset, err_refused, err_closed, err_other;
static int stopping;

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void url_encode(char *out, size_t cap, const char *in) {
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)in; *p && o + 4 < cap; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("-_.!~*'()", *p)) out[o++] = (char)*p;
    else o += (size_t)snprintf(out + o, cap - o, "%%%02X", *p);
  }
  out[o] = 0;
}

static void count_error(int code) {
  errors++;
  if (code == ECONNRESET || code == EPIPE) err_reset++;
  else if (code == ECONNREFUSED) err_refused++;
  else if (code == 0) err_closed++;
  else err_other++;
}

static void send_request(client *c);

static void open_socket(client *c) {
  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->fd < 0) {
    count_error(errno);
    c->retry_at = now_ns() + RETRY_NS;
    return;
  }
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (have_local && bind(c->fd, (struct sockaddr *)&local, sizeof local) != 0) {
    count_error(errno);
    close(c->fd);
    c->fd = -1;
    c->retry_at = now_ns() + RETRY_NS;
    return;
  }
  c->connected = 0;
  c->len = 0;
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP, .data.ptr = c};
  epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev);
  if (connect(c->fd, (struct sockaddr *)&server, sizeof server) != 0 && errno != EINPROGRESS) {
    count_error(errno);
    close(c->fd);
    c->fd = -1;
    c->retry_at = now_ns() + RETRY_NS;
  }
}

/* The connection failed or closed: reconnect and ask again after RETRY_NS. */
static void fail(client *c, int code) {
  if (!stopping) count_error(code);
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  c->len = 0;
  c->retry_at = now_ns() + RETRY_NS;
}

static void send_request(client *c) {
  char path[512], enc[480];
  int n = snprintf(path, sizeof path, "GET /v1/shape?table=%s&offset=%s", table, c->offset);
  if (c->handle[0]) {
    url_encode(enc, sizeof enc, c->handle);
    n += snprintf(path + n, sizeof path - (size_t)n, "&handle=%s", enc);
  }
  if (c->live) n += snprintf(path + n, sizeof path - (size_t)n, "&cursor=%s&live=true", c->cursor);
  n += snprintf(path + n, sizeof path - (size_t)n, " HTTP/1.1\r\nHost: sluice.bench\r\n\r\n");
  ssize_t w = write(c->fd, path, (size_t)n);
  if (w != n) fail(c, w < 0 ? errno : EPIPE);
}

static void start_more(void) {
  while (in_sync < sync_concurrency && next_to_start < nclients) {
    client *c = &clients[next_to_start++];
    c->in_sync_slot = 1;
    c->t0 = now_ns();
    in_sync++;
    open_socket(c);
  }
}

static void record_stamp(const char *body, size_t len, long long at) {
  static const char key[] = "\"stamp\":\"";
  const char *p = body, *end = body + len;
  int data = 0;
  while ((p = memmem(p, (size_t)(end - p), key, sizeof key - 1)) != NULL) {
    p += sizeof key - 1;
    data = 1;
    long long run = 0, stamp = 0;
    while (p < end && *p >= '0' && *p <= '9') run = run * 10 + (*p++ - '0');
    if (p < end && *p == ':') p++;
    while (p < end && *p >= '0' && *p <= '9') stamp = stamp * 10 + (*p++ - '0');
    if (run != current_run) continue;
    int i;
    for (i = 0; i < nstamps && stamps[i] != stamp; i++) {}
    if (i == nstamps) {
      if (nstamps == MAX_STAMPS) continue;
      stamps[nstamps] = stamp;
      receipts[nstamps] = malloc(sizeof(double) * (size_t)nclients * 2);
      receipt_n[nstamps] = 0;
      nstamps++;
    }
    if (receipt_n[i] < nclients * 2) receipts[i][receipt_n[i]++] = (double)(at - stamp) / 1e6;
  }
  if (data) live_with_data++;
}

/* Copies a header's value (trimmed) when `line` (lower-cased name match) is that header. */
static int header_value(const char *line, size_t n, const char *name, char *out, size_t cap) {
  size_t k = strlen(name);
  if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':') return 0;
  const char *v = line + k + 1, *e = line + n;
  while (v < e && (*v == ' ' || *v == '\t')) v++;
  while (e > v && (e[-1] == ' ' || e[-1] == '\t')) e--;
  if (out != NULL) {
    size_t m = (size_t)(e - v) < cap - 1 ? (size_t)(e - v) : cap - 1;
    memcpy(out, v, m);
    out[m] = 0;
  }
  return 1;
}

/* One whole response is in c->buf: returns its length, 0 if incomplete, -1 if malformed. */
static long parse_response(client *c) {
  char *head_end = memmem(c->buf, c->len, "\r\n\r\n", 4);
  if (head_end == NULL) return 0;
  size_t head_len = (size_t)(head_end - c->buf) + 4;
  long content_length = -1;
  int chunked = 0, close_after = 0, up_to_date = 0;
  char handle[160] = "", offset[64] = "", cursor[64] = "", value[64];
  int status = atoi(c->buf + 9);
  char *line = memchr(c->buf, '\n', head_len) + 1;
  while (line < head_end) {
    char *eol = memmem(line, (size_t)(head_end + 2 - line), "\r\n", 2);
    size_t n = (size_t)(eol - line);
    if (header_value(line, n, "content-length", value, sizeof value)) content_length = atol(value);
    else if (header_value(line, n, "transfer-encoding", value, sizeof value)) chunked = strcasestr(value, "chunked") != NULL;
    else if (header_value(line, n, "connection", value, sizeof value)) close_after = strcasecmp(value, "close") == 0;
    else if (header_value(line, n, "electric-handle", handle, sizeof handle)) {}
    else if (header_value(line, n, "electric-offset", offset, sizeof offset)) {}
    else if (header_value(line, n, "electric-cursor", cursor, sizeof cursor)) {}
    else if (header_value(line, n, "electric-up-to-date", NULL, 0)) up_to_date = 1;
    line = eol + 2;
  }
  char *body;
  size_t body_len, total;
  if (chunked) {
    /* De-chunk in place after the head. */
    size_t at = head_len, out = head_len;
    for (;;) {
      char *le = memmem(c->buf + at, c->len - at, "\r\n", 2);
      if (le == NULL) return 0;
      long size = strtol(c->buf + at, NULL, 16);
      size_t start = (size_t)(le - c->buf) + 2;
      if (size == 0) {
        if (c->len < start + 2) return 0;
        total = start + 2;
        break;
      }
      if (c->len < start + (size_t)size + 2) return 0;
      at = start + (size_t)size + 2;
    }
    /* Complete: now compact the chunks (the loop above only checked). */
    at = head_len;
    for (;;) {
      char *le = memmem(c->buf + at, c->len - at, "\r\n", 2);
      long size = strtol(c->buf + at, NULL, 16);
      size_t start = (size_t)(le - c->buf) + 2;
      if (size == 0) break;
      memmove(c->buf + out, c->buf + start, (size_t)size);
      out += (size_t)size;
      at = start + (size_t)size + 2;
    }
    body = c->buf + head_len;
    body_len = out - head_len;
  } else {
    if (content_length < 0) content_length = 0;
    if (c->len < head_len + (size_t)content_length) return 0;
    body = c->buf + head_len;
    body_len = (size_t)content_length;
    total = head_len + (size_t)content_length;
  }
  long long at = now_ns();
  requests++;
  if (c->live) live_requests++;
  if (status > 0 && status < MAX_STATUS) statuses[status]++;
  if (status == 409) {
    conflicts++;
    if (handle[0]) strcpy(c->handle, handle);
    strcpy(c->offset, "-1");
    c->live = 0;
  } else if (status != 200) {
    other_status++;
    c->retry_at = at + RETRY_NS;
  } else {
    if (handle[0]) strcpy(c->handle, handle);
    if (offset[0]) strcpy(c->offset, offset);
    if (cursor[0]) strcpy(c->cursor, cursor);
    if (c->live) record_stamp(body, body_len, at);
    else {
      sync_bytes += (long long)body_len;
      if (up_to_date) {
        c->live = 1;
        if (!c->synced) {
          c->synced = 1;
          sync_ms[synced_count++] = (double)(at - c->t0) / 1e6;
        }
        if (c->in_sync_slot) {
          c->in_sync_slot = 0;
          in_sync--;
        }
      }
    }
  }
  if (close_after) return -2 - (long)total; /* caller reconnects */
  return (long)total;
}

static void on_readable(client *c) {
  int eof = 0;
  for (;;) {
    if (c->cap - c->len < 16384) {
      c->cap = c->cap * 2 + 65536;
      c->buf = realloc(c->buf, c->cap);
    }
    size_t space = c->cap - c->len;
    ssize_t r = read(c->fd, c->buf + c->len, space);
    if (r > 0) {
      c->len += (size_t)r;
      /* A short read drained the socket: no second read just to see EAGAIN (epoll is level-triggered, so
       * anything arriving later is reported again). */
      if ((size_t)r < space) break;
      continue;
    }
    if (r == 0) {
      eof = 1;
      break;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    if (errno == EINTR) continue;
    fail(c, errno);
    return;
  }
  long done = parse_response(c);
  if (done == -1) {
    fail(c, EPROTO);
    return;
  }
  if (done == 0) {
    if (eof) fail(c, 0);
    return;
  }
  int reconnect = done < -1 || eof;
  size_t total = (size_t)(done < -1 ? -2 - done : done);
  memmove(c->buf, c->buf + total, c->len - total);
  c->len -= total;
  if (reconnect) {
    /* The server closed after a whole response (Connection: close): a new socket, no error. */
    close(c->fd);
    c->fd = -1;
    c->len = 0;
    if (c->retry_at == 0) open_socket(c);
    return;
  }
  if (c->retry_at == 0) send_request(c);
}

static void print_counters(FILE *f) {
  fprintf(f, "\"live\":%d,\"requests\":%lld,\"liveRequests\":%lld,\"liveWithData\":%lld,\"errors\":%lld,\"conflicts\":%lld,\"otherStatus\":%lld,\"syncBytes\":%lld,\"statuses\":{", synced_count, requests, live_requests, live_with_data, errors, conflicts, other_status, sync_bytes);
  int first = 1;
  for (int s = 0; s < MAX_STATUS; s++)
    if (statuses[s]) {
      fprintf(f, "%s\"%d\":%lld", first ? "" : ",", s, statuses[s]);
      first = 0;
    }
  fprintf(f, "},\"errorKinds\":{");
  first = 1;
  const char *names[] = {"ECONNRESET", "ECONNREFUSED", "closed", "other"};
  long long values[] = {err_reset, err_refused, err_closed, err_other};
  for (int i = 0; i < 4; i++)
    if (values[i]) {
      fprintf(f, "%s\"%s\":%lld", first ? "" : ",", names[i], values[i]);
      first = 0;
    }
  fprintf(f, "}");
}

static void command(char *line) {
  char *nl = strchr(line, '\n');
  if (nl) *nl = 0;
  if (strncmp(line, "measure ", 8) == 0) {
    current_run = atoll(line + 8);
    for (int i = 0; i < nstamps; i++) free(receipts[i]);
    nstamps = 0;
    printf("{}\n");
  } else if (strncmp(line, "count ", 6) == 0) {
    long long stamp = atoll(line + 6);
    int n = 0;
    for (int i = 0; i < nstamps; i++)
      if (stamps[i] == stamp) n = receipt_n[i];
    printf("{\"count\":%d}\n", n);
  } else if (strcmp(line, "receipts") == 0) {
    printf("{");
    for (int i = 0; i < nstamps; i++) {
      printf("%s\"%lld\":[", i ? "," : "", stamps[i]);
      for (int j = 0; j < receipt_n[i]; j++) printf("%s%.3f", j ? "," : "", receipts[i][j]);
      printf("]");
    }
    printf("}\n");
  } else if (strcmp(line, "status") == 0 || strcmp(line, "stop") == 0) {
    if (line[1] == 't' && line[2] == 'o') {
      stopping = 1;
      for (int i = 0; i < nclients; i++)
        if (clients[i].fd >= 0) close(clients[i].fd);
    }
    printf("{");
    print_counters(stdout);
    printf("}\n");
    if (stopping) {
      fflush(stdout);
      exit(0);
    }
  } else {
    printf("{\"error\":\"unknown command\"}\n");
  }
  fflush(stdout);
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: %s HOST PORT LOCAL_ADDRESS CLIENTS SYNC_CONCURRENCY TABLE\n", argv[0]);
    return 2;
  }
  server.sin_family = AF_INET;
  server.sin_port = htons((uint16_t)atoi(argv[2]));
  inet_pton(AF_INET, argv[1], &server.sin_addr);
  if (argv[3][0] != 0 && strcmp(argv[3], "-") != 0) {
    local.sin_family = AF_INET;
    inet_pton(AF_INET, argv[3], &local.sin_addr);
    have_local = 1;
  }
  nclients = atoi(argv[4]);
  sync_concurrency = atoi(argv[5]);
  table = argv[6];
  clients = calloc((size_t)nclients, sizeof *clients);
  sync_ms = calloc((size_t)nclients, sizeof *sync_ms);
  for (int i = 0; i < nclients; i++) {
    clients[i].fd = -1;
    strcpy(clients[i].offset, "-1");
  }
  epfd = epoll_create1(EPOLL_CLOEXEC);
  fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
  struct epoll_event sev = {.events = EPOLLIN, .data.ptr = NULL};
  epoll_ctl(epfd, EPOLL_CTL_ADD, 0, &sev);
  start_ns = now_ns();
  start_more();
  int announced = 0;
  char in[4096];
  size_t in_len = 0;
  struct epoll_event events[1024];
  long long next_retry_scan = 0;
  for (;;) {
    int n = epoll_wait(epfd, events, 1024, 10);
    for (int i = 0; i < n; i++) {
      client *c = events[i].data.ptr;
      if (c == NULL) {
        ssize_t r = read(0, in + in_len, sizeof in - in_len - 1);
        if (r == 0) return 0; /* the orchestrator went away */
        if (r < 0) continue;
        in_len += (size_t)r;
        in[in_len] = 0;
        char *nl;
        while ((nl = strchr(in, '\n')) != NULL) {
          *nl = 0;
          command(in);
          size_t used = (size_t)(nl - in) + 1;
          memmove(in, nl + 1, in_len - used + 1);
          in_len -= used;
        }
        continue;
      }
      if (c->fd < 0) continue;
      if (!c->connected && (events[i].events & EPOLLOUT)) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          fail(c, err);
          continue;
        }
        c->connected = 1;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
        send_request(c);
        continue;
      }
      if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) on_readable(c);
    }
    long long t = now_ns();
    if (t >= next_retry_scan) {
      next_retry_scan = t + 10000000LL;
      for (int i = 0; i < nclients; i++) {
        client *c = &clients[i];
        if (c->retry_at != 0 && c->retry_at <= t) {
          c->retry_at = 0;
          if (c->fd < 0) open_socket(c);
          else send_request(c);
        }
      }
    }
    start_more();
    if (!announced && synced_count == nclients) {
      announced = 1;
      printf("{\"event\":\"synced\",\"clients\":%d,\"wallMs\":%.3f,\"syncMs\":[", nclients, (double)(now_ns() - start_ns) / 1e6);
      for (int i = 0; i < synced_count; i++) printf("%s%.3f", i ? "," : "", sync_ms[i]);
      printf("],");
      print_counters(stdout);
      printf("}\n");
      fflush(stdout);
    }
  }
}
