/* The holder spawner of bench/holders.py: N small processes holding GPU nodes.

   holders N UVM GPU0 [GPU1 ...]

   Forks N children; child i opens GPU[i % count] and UVM read-only and maps
   4 KiB of each (MAP_SHARED), as a CUDA process holds its nodes by fd and by
   mmap, then sleeps in pause(). A child dies with its parent
   (PR_SET_PDEATHSIG). For each child the parent prints "PID GPU" (GPU the
   index into the GPU list), then "ready N" once all are set up, or "failed"
   if one could not open or map its nodes. On EOF of stdin (or once it has
   said "failed") it SIGKILLs and reaps exactly the children it started,
   nothing else, and exits.

   A forked C process costs a few pages, where a Python fork costs about
   1 MB: 10,000 of these fit where 10,000 Python holders do not. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* Opens and maps one node; 0 on success. */
static int hold(const char *node) {
  int fd = open(node, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  return mmap(0, 4096, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED ? -1 : 0;
}

/* The child's life: dies with the parent, holds its two nodes, reports, sleeps. */
static void child(pid_t parent, const char *gpu, const char *uvm, int ready_w) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1); /* the parent died before prctl */
  int nul = open("/dev/null", O_RDWR);
  dup2(nul, 0);
  dup2(nul, 1);
  if (nul > 1) close(nul);
  char c = (hold(gpu) == 0 && hold(uvm) == 0) ? '.' : '!';
  (void)!write(ready_w, &c, 1);
  close(ready_w);
  for (;;) pause();
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: holders N UVM GPU0 [GPU1 ...]\n");
    return 2;
  }
  long n = atol(argv[1]);
  const char *uvm = argv[2];
  char **gpus = argv + 3;
  int ngpus = argc - 3;
  pid_t *pids = calloc(n > 0 ? n : 1, sizeof(pid_t));
  int ready[2];
  if (!pids || pipe(ready) != 0) return 1;
  pid_t self = getpid();
  long started = 0;
  for (long i = 0; i < n; i++) {
    pid_t p = fork();
    if (p == 0) {
      close(ready[0]);
      child(self, gpus[i % ngpus], uvm, ready[1]);
    }
    if (p < 0) {
      perror("fork");
      break;
    }
    pids[started++] = p;
    printf("%d %ld\n", (int)p, i % ngpus);
  }
  close(ready[1]);
  long got = 0;
  int failed = started < n;
  char buf[4096];
  while (got < started) {
    ssize_t r = read(ready[0], buf, sizeof buf);
    if (r <= 0) break;
    for (ssize_t k = 0; k < r; k++) failed |= buf[k] == '!';
    got += r;
  }
  failed |= got < n;
  if (failed) {
    printf("failed\n");
  } else {
    printf("ready %ld\n", got);
  }
  fflush(stdout);
  if (!failed)
    while (read(0, buf, sizeof buf) > 0) {
    }
  for (long i = 0; i < started; i++) kill(pids[i], SIGKILL);
  for (long i = 0; i < started; i++) waitpid(pids[i], 0, 0);
  return failed;
}
