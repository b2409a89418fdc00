/* spank_remora: Remora GPUs for Slurm jobs, as a SPANK plugin.
 *
 *   sbatch --remora-gpus=2 --remora-mem=16GiB job.sh
 *
 * asks for two GPUs from the Remora pool with a 16 GiB limit on each. Per job:
 *  - sbatch/salloc/srun (allocator and local context): the options are checked and copied
 *    into the job control environment (SPANK_REMORA_MEM, SPANK_REMORA_GPUS), where the
 *    prolog, the epilogs and slurmctld's EpilogSlurmctld see them;
 *  - slurmd's job prolog (root): `remora-slurm prolog` creates the job's tenant with the
 *    requested limit and GPUs and writes its token to <token_dir>/job-<id>.token, readable
 *    only by the job's user;
 *  - each step (slurmstepd, as the user): REMORA_SERVER, REMORA_TOKEN_FILE and LD_PRELOAD
 *    (the shim first) are set in the tasks' environment; a step of a job whose tenant could
 *    not be created fails with a message instead of running without its GPUs;
 *  - slurmd's job epilog (root): `remora-slurm epilog` removes the tenant, ending its
 *    sessions so their memory returns, and the token file. If the node fails no node
 *    epilog runs: slurm.conf's EpilogSlurmctld=remora-slurm does it from the controller.
 * Jobs without --remora-* options are not touched. A prolog failure is logged and does not
 * drain the node (only the job's steps fail). The administrator's caps in the config file
 * (max_memory, max_gpus, allow_unlimited) refuse a job at submission where that host has the
 * file, and in the prolog for good.
 *
 * plugstack.conf: required /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_remora.so [config=PATH] [helper=PATH]
 * The rest (server URL, admin access, token directory, shim) is in /etc/remora/slurm.conf,
 * shared with remora-slurm; see docs/SLURM.md.
 *
 * Built against Debian's libslurm-dev headers; a SPANK plugin must match the Slurm release
 * that loads it.
 */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <slurm/spank.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

SPANK_PLUGIN(remora, 1);

#ifndef REMORA_SLURM_HELPER
#define REMORA_SLURM_HELPER "/usr/sbin/remora-slurm"
#endif
#define DEFAULT_CONFIG "/etc/remora/slurm.conf"
#define MAX_VALUE 1024

/* The options as given on this process's command line (local and allocator contexts). */
static char opt_mem[64];
static char opt_gpus[16];

/* "16GiB", "512M", "1.5G", "4096": digits, an optional fraction, an optional unit. The
 * helper parses it for real; this catches typos at submission. */
static int valid_size(const char *s) {
  const char *p = s;
  if (strcmp(s, "unlimited") == 0 || strcmp(s, "max") == 0) return 1;
  if (*p < '0' || *p > '9') return 0;
  while (*p >= '0' && *p <= '9') p++;
  if (*p == '.') {
    p++;
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
  }
  if (*p && strchr("kKmMgGtT", *p)) {
    p++;
    if (*p == 'i') p++;
  }
  if (*p == 'B' || *p == 'b') p++;
  return *p == '\0' && (p - s) < (long)sizeof(opt_mem);
}

static int valid_count(const char *s) {
  char *end = NULL;
  long v = strtol(s, &end, 10);
  return *s && *end == '\0' && v >= 1 && v <= 1024;
}

static int mem_cb(int val, const char *optarg, int remote) {
  (void)val;
  if (optarg == NULL || !valid_size(optarg)) {
    if (!remote) slurm_error("--remora-mem: '%s' is not a size (e.g. 16GiB, 512MiB)", optarg ? optarg : "");
    return -1;
  }
  snprintf(opt_mem, sizeof(opt_mem), "%s", optarg);
  return 0;
}

static int gpus_cb(int val, const char *optarg, int remote) {
  (void)val;
  if (optarg == NULL || !valid_count(optarg)) {
    if (!remote) slurm_error("--remora-gpus: '%s' is not a number of GPUs (1 or more)", optarg ? optarg : "");
    return -1;
  }
  snprintf(opt_gpus, sizeof(opt_gpus), "%s", optarg);
  return 0;
}

static struct spank_option mem_option = {"remora-mem", "SIZE",
                                         "memory limit on each Remora GPU of the job, e.g. 16GiB", 1, 0, mem_cb};
static struct spank_option gpus_option = {"remora-gpus", "N",
                                          "Remora GPUs from the pool for the job (default 1)", 1, 0, gpus_cb};

/* ---- configuration ------------------------------------------------------------------ */

struct config {
  char path[MAX_VALUE];    /* the config file */
  char helper[MAX_VALUE];  /* remora-slurm */
  char server[MAX_VALUE];
  char token_dir[MAX_VALUE];
  char shim[MAX_VALUE];
  /* The administrator's caps (remora-slurm enforces them in the prolog; here they refuse a
   * job at submission). Sizes in bytes; 0: not set. */
  unsigned long long default_memory, max_memory;
  long default_gpus, max_gpus;
  int allow_unlimited;
};

/* Bytes of a size as remora-slurm reads it ("16GiB", "512M", "1.5G", "4096": binary units);
 * *unlimited for "unlimited" or "max". -1 if malformed. */
static int parse_size(const char *s, unsigned long long *bytes, int *unlimited) {
  char *end = NULL;
  long double v, mult = 1;
  *unlimited = 0;
  *bytes = 0;
  if (strcmp(s, "unlimited") == 0 || strcmp(s, "max") == 0) {
    *unlimited = 1;
    return 0;
  }
  if (*s < '0' || *s > '9') return -1;
  v = strtold(s, &end);
  switch (*end) {
    case 'k': case 'K': mult = 1024.0L; end++; break;
    case 'm': case 'M': mult = 1024.0L * 1024; end++; break;
    case 'g': case 'G': mult = 1024.0L * 1024 * 1024; end++; break;
    case 't': case 'T': mult = 1024.0L * 1024 * 1024 * 1024; end++; break;
    case 'p': case 'P': mult = 1024.0L * 1024 * 1024 * 1024 * 1024; end++; break;
    default: break;
  }
  if (mult > 1 && *end == 'i') end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end != '\0' || v * mult >= 18446744073709551615.0L) return -1;
  *bytes = (unsigned long long)(v * mult);
  return 0;
}

static void trim(char *s) {
  char *b = s, *e;
  while (*b == ' ' || *b == '\t') b++;
  memmove(s, b, strlen(b) + 1);
  e = s + strlen(s);
  while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n')) *--e = '\0';
}

/* Plugin arguments, then the keys the plugin needs from the config file (the helper checks
 * the whole file). `quiet`: a missing file is no error worth a line (at submission, on a
 * host without the file). */
static int load_config_from(int ac, char **av, struct config *c, int quiet) {
  FILE *f;
  char line[2 * MAX_VALUE];
  int i;
  memset(c, 0, sizeof(*c));
  snprintf(c->path, sizeof(c->path), "%s", DEFAULT_CONFIG);
  snprintf(c->helper, sizeof(c->helper), "%s", REMORA_SLURM_HELPER);
  snprintf(c->token_dir, sizeof(c->token_dir), "%s", "/run/remora-slurm");
  for (i = 0; i < ac; i++) {
    if (strncmp(av[i], "config=", 7) == 0) snprintf(c->path, sizeof(c->path), "%s", av[i] + 7);
    else if (strncmp(av[i], "helper=", 7) == 0) snprintf(c->helper, sizeof(c->helper), "%s", av[i] + 7);
    else {
      slurm_error("remora: unknown plugin argument '%s' (config=PATH, helper=PATH)", av[i]);
      return -1;
    }
  }
  f = fopen(c->path, "r");
  if (f == NULL) {
    if (!quiet) slurm_error("remora: cannot read %s: %s", c->path, strerror(errno));
    return -1;
  }
  while (fgets(line, sizeof(line), f) != NULL) {
    char *hash = strchr(line, '#'), *eq;
    if (hash) *hash = '\0';
    eq = strchr(line, '=');
    if (eq == NULL) continue;
    *eq = '\0';
    trim(line);
    trim(eq + 1);
    if (strcmp(line, "server") == 0) snprintf(c->server, sizeof(c->server), "%s", eq + 1);
    else if (strcmp(line, "token_dir") == 0) snprintf(c->token_dir, sizeof(c->token_dir), "%s", eq + 1);
    else if (strcmp(line, "shim") == 0) snprintf(c->shim, sizeof(c->shim), "%s", eq + 1);
    else if (strcmp(line, "default_memory") == 0 || strcmp(line, "max_memory") == 0) {
      unsigned long long v = 0;
      int unlimited = 0;
      if (parse_size(eq + 1, &v, &unlimited) == 0 && !unlimited)
        *(strcmp(line, "max_memory") == 0 ? &c->max_memory : &c->default_memory) = v;
    } else if (strcmp(line, "default_gpus") == 0) c->default_gpus = strtol(eq + 1, NULL, 10);
    else if (strcmp(line, "max_gpus") == 0) c->max_gpus = strtol(eq + 1, NULL, 10);
    else if (strcmp(line, "allow_unlimited") == 0)
      c->allow_unlimited = strcmp(eq + 1, "yes") == 0 || strcmp(eq + 1, "true") == 0 || strcmp(eq + 1, "1") == 0;
  }
  fclose(f);
  return 0;
}

static int load_config(int ac, char **av, struct config *c) { return load_config_from(ac, av, c, 0); }

/* At submission: the job's options against the administrator's caps, when this host has the
 * config file (remora-slurm checks again in the prolog, which is what counts). */
static int check_caps(int ac, char **av) {
  struct config c;
  unsigned long long mem = 0;
  int unlimited = 0;
  long gpus;
  if (load_config_from(ac, av, &c, 1) != 0) return 0;
  gpus = opt_gpus[0] ? strtol(opt_gpus, NULL, 10) : (c.default_gpus > 0 ? c.default_gpus : 1);
  if (c.max_gpus > 0 && gpus > c.max_gpus) {
    slurm_error("--remora-gpus=%ld: this cluster allows at most %ld Remora GPUs per job and node (max_gpus in %s)",
                gpus, c.max_gpus, c.path);
    return -1;
  }
  if (opt_mem[0]) {
    if (parse_size(opt_mem, &mem, &unlimited) != 0) return 0; /* mem_cb already checked the format */
  } else if (c.default_memory) {
    mem = c.default_memory;
  } else if (c.max_memory) {
    mem = c.max_memory;
  } else {
    unlimited = 1;
  }
  if (unlimited && (c.max_memory || !c.allow_unlimited)) {
    slurm_error("--remora-mem: this cluster does not allow jobs without a memory limit; give --remora-mem=SIZE%s",
                c.max_memory ? " (at most max_memory)" : "");
    return -1;
  }
  if (!unlimited && c.max_memory && mem > c.max_memory) {
    slurm_error("--remora-mem=%s: more than this cluster allows per GPU (max_memory in %s)", opt_mem, c.path);
    return -1;
  }
  return 0;
}

/* ---- the helper ------------------------------------------------------------------------ */

/* Runs the helper with `args` (NULL-terminated, after argv[0] and --config), logging its
 * output through Slurm. Returns its exit status, or -1. */
static int run_helper(const struct config *c, const char *const *args) {
  const char *argv[24];
  int n = 0, p[2], status = 0;
  pid_t pid;
  char out[8192];
  size_t len = 0;
  ssize_t r;
  argv[n++] = c->helper;
  argv[n++] = "--config";
  argv[n++] = c->path;
  while (*args && n < 23) argv[n++] = *args++;
  argv[n] = NULL;
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  pid = fork();
  if (pid < 0) {
    close(p[0]);
    close(p[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(p[1], 1);
    dup2(p[1], 2);
    execv(c->helper, (char *const *)argv);
    fprintf(stderr, "cannot run %s: %s\n", c->helper, strerror(errno));
    _exit(127);
  }
  close(p[1]);
  while ((r = read(p[0], out + len, sizeof(out) - 1 - len)) > 0 || (r < 0 && errno == EINTR))
    if (r > 0) len += (size_t)r;
  close(p[0]);
  out[len] = '\0';
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  for (char *line = strtok(out, "\n"); line != NULL; line = strtok(NULL, "\n")) {
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) slurm_info("%s", line);
    else slurm_error("%s", line);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The job's options where slurmd and slurmstepd see them. */
static int job_options(spank_t sp, char **mem, char **gpus) {
  *mem = NULL;
  *gpus = NULL;
  if (spank_option_getopt(sp, &mem_option, mem) != ESPANK_SUCCESS) *mem = NULL;
  if (spank_option_getopt(sp, &gpus_option, gpus) != ESPANK_SUCCESS) *gpus = NULL;
  return *mem != NULL || *gpus != NULL;
}

/* ---- SPANK entry points ------------------------------------------------------------------- */

int slurm_spank_init(spank_t sp, int ac, char **av) {
  (void)ac;
  (void)av;
  if (spank_option_register(sp, &mem_option) != ESPANK_SUCCESS ||
      spank_option_register(sp, &gpus_option) != ESPANK_SUCCESS)
    return -1;
  return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av) {
  spank_context_t ctx = spank_context();
  if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR) return 0;
  if ((opt_mem[0] || opt_gpus[0]) && check_caps(ac, av) != 0) return -1;
  if (opt_mem[0] && spank_job_control_setenv(sp, "REMORA_MEM", opt_mem, 1) != ESPANK_SUCCESS) return -1;
  if (opt_gpus[0] && spank_job_control_setenv(sp, "REMORA_GPUS", opt_gpus, 1) != ESPANK_SUCCESS) return -1;
  return 0;
}

int slurm_spank_job_prolog(spank_t sp, int ac, char **av) {
  struct config c;
  char *mem, *gpus, job[16], uid[16], gid[16], nodes[16];
  const char *args[16];
  uint32_t job_id = 0;
  uid_t job_uid = 0;
  int n = 0, rc;
  const char *e;
  if (!job_options(sp, &mem, &gpus)) return 0;
  if (load_config(ac, av, &c) != 0) return 0; /* the steps fail: no token file */
  if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_UID, &job_uid) != ESPANK_SUCCESS) {
    slurm_error("remora: cannot learn the job's id and user");
    return 0;
  }
  snprintf(job, sizeof(job), "%u", job_id);
  snprintf(uid, sizeof(uid), "%u", (unsigned)job_uid);
  e = getenv("SLURM_JOB_GID");
  snprintf(gid, sizeof(gid), "%s", e ? e : uid);
  e = getenv("SLURM_JOB_NUM_NODES");
  snprintf(nodes, sizeof(nodes), "%s", e ? e : "1");
  args[n++] = "prolog";
  args[n++] = "--job";
  args[n++] = job;
  args[n++] = "--uid";
  args[n++] = uid;
  args[n++] = "--gid";
  args[n++] = gid;
  args[n++] = "--nodes";
  args[n++] = nodes;
  if (mem) {
    args[n++] = "--memory";
    args[n++] = mem;
  }
  if (gpus) {
    args[n++] = "--gpus";
    args[n++] = gpus;
  }
  args[n] = NULL;
  rc = run_helper(&c, args);
  if (rc != 0) slurm_error("remora: job %s: no Remora tenant (remora-slurm prolog exit %d); its steps will fail", job, rc);
  return 0;
}

int slurm_spank_user_init(spank_t sp, int ac, char **av) {
  struct config c;
  char *mem, *gpus, token[MAX_VALUE + 32], preload[4 * MAX_VALUE], old[3 * MAX_VALUE];
  uint32_t job_id = 0;
  int fd;
  if (!spank_remote(sp) || !job_options(sp, &mem, &gpus)) return 0;
  if (load_config(ac, av, &c) != 0) return -1;
  if (c.server[0] == '\0' || c.shim[0] == '\0') {
    slurm_error("remora: %s must set 'server' and 'shim'", c.path);
    return -1;
  }
  if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) return -1;
  snprintf(token, sizeof(token), "%s/job-%u.token", c.token_dir, job_id);
  fd = open(token, O_RDONLY | O_CLOEXEC); /* as the job's user */
  if (fd < 0) {
    slurm_error("remora: job %u has no Remora tenant (%s: %s); see slurmd's log on this node", job_id, token,
                strerror(errno));
    return -1;
  }
  close(fd);
  if (spank_getenv(sp, "LD_PRELOAD", old, sizeof(old)) == ESPANK_SUCCESS && old[0])
    snprintf(preload, sizeof(preload), "%s:%s", c.shim, old);
  else
    snprintf(preload, sizeof(preload), "%s", c.shim);
  if (spank_setenv(sp, "REMORA_SERVER", c.server, 1) != ESPANK_SUCCESS ||
      spank_setenv(sp, "REMORA_TOKEN_FILE", token, 1) != ESPANK_SUCCESS ||
      spank_setenv(sp, "LD_PRELOAD", preload, 1) != ESPANK_SUCCESS) {
    slurm_error("remora: cannot set the job's environment");
    return -1;
  }
  return 0;
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av) {
  struct config c;
  char *mem, *gpus, job[16];
  const char *args[4];
  uint32_t job_id = 0;
  int rc;
  if (!job_options(sp, &mem, &gpus)) return 0;
  if (load_config(ac, av, &c) != 0) return 0;
  if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) return 0;
  snprintf(job, sizeof(job), "%u", job_id);
  args[0] = "epilog";
  args[1] = "--job";
  args[2] = job;
  args[3] = NULL;
  rc = run_helper(&c, args);
  if (rc != 0) slurm_error("remora: job %s: its tenant may remain (remora-slurm epilog exit %d)", job, rc);
  return 0;
}
