/* serve_load.c — a load generator for npu-serve (bench/serving.lua drives it): C clients, each
 * a thread with one keep-alive HTTP/1.1 connection to 127.0.0.1:PORT, send N POSTs of BODY to
 * PATH each and time them.  Prints one line:
 *   ok=<200 answers> failed=<other answers or broken connections> p50_ms=.. p99_ms=.. rps=..
 * and, with --expect TEXT, counts answers whose body lacks TEXT as failed.  Loopback only. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int port, clients, requests;
static const char *path, *body, *expect;
static double *lat;
static long ok_count, fail_count;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int connect_local(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* One request on fd; the status (0: the connection broke).  Reads the headers, then exactly
   Content-Length bytes of body. */
static int one_request(int fd, char *buf, size_t cap, const char *req, size_t req_len) {
  if (write(fd, req, req_len) != (ssize_t)req_len) return 0;
  size_t n = 0;
  char *hdr_end = NULL;
  while (!hdr_end) {
    ssize_t k = read(fd, buf + n, cap - 1 - n);
    if (k <= 0) return 0;
    n += (size_t)k;
    buf[n] = 0;
    hdr_end = strstr(buf, "\r\n\r\n");
  }
  int status = atoi(buf + 9);
  char *cl = strcasestr(buf, "Content-Length:");
  size_t want = cl ? strtoul(cl + 15, NULL, 10) : 0, have = n - (size_t)(hdr_end + 4 - buf);
  while (have < want && n < cap - 1) {
    ssize_t k = read(fd, buf + n, cap - 1 - n);
    if (k <= 0) return 0;
    n += (size_t)k, have += (size_t)k;
  }
  buf[n] = 0;
  if (expect && status == 200 && !strstr(hdr_end, expect)) return -status;
  return status;
}

static void *client(void *arg) {
  long id = (long)arg;
  char req[65536], *buf = malloc(1 << 20);
  int len = snprintf(req, sizeof req,
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s", path, strlen(body), body);
  int fd = connect_local();
  long ok = 0, failed = 0;
  for (int i = 0; i < requests; i++) {
    double t0 = now_ms();
    int st = fd >= 0 ? one_request(fd, buf, 1 << 20, req, (size_t)len) : 0;
    lat[id * requests + i] = now_ms() - t0;
    if (st == 200) ok++;
    else {
      failed++;
      if (st == 0) { /* reconnect and go on */
        if (fd >= 0) close(fd);
        fd = connect_local();
      }
    }
  }
  if (fd >= 0) close(fd);
  free(buf);
  pthread_mutex_lock(&mu);
  ok_count += ok, fail_count += failed;
  pthread_mutex_unlock(&mu);
  return NULL;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: serve_load PORT PATH BODY CLIENTS REQUESTS [--expect TEXT]\n");
    return 2;
  }
  port = atoi(argv[1]), path = argv[2], body = argv[3], clients = atoi(argv[4]), requests = atoi(argv[5]);
  if (argc > 7 && strcmp(argv[6], "--expect") == 0) expect = argv[7];
  lat = calloc((size_t)clients * (size_t)requests, sizeof *lat);
  pthread_t *t = calloc((size_t)clients, sizeof *t);
  double t0 = now_ms();
  for (long i = 0; i < clients; i++) pthread_create(&t[i], NULL, client, (void *)i);
  for (int i = 0; i < clients; i++) pthread_join(t[i], NULL);
  double secs = (now_ms() - t0) / 1e3;
  size_t n = (size_t)clients * (size_t)requests;
  qsort(lat, n, sizeof *lat, cmp);
  printf("ok=%ld failed=%ld p50_ms=%.3f p99_ms=%.3f rps=%.0f\n", ok_count, fail_count, lat[n / 2],
         lat[(size_t)((double)n * 0.99)], (double)n / secs);
  return 0;
}
