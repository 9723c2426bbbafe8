/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * dmi.h - DMI: a global address space with selective coherence
 * (Suzuki and Taura, "dmi-reconfiguration", sec. 3; docs/dmi.md).
 *
 * Start a program on N nodes with `dmi run -n N ./prog args`; every node
 * runs main(), calls DMI_init() and ends with DMI_finalize(), once: a
 * process takes part in one run (DMI_init after DMI_finalize returns -1,
 * EINVAL). Link with `pkg-config --cflags --libs dmi`.
 *
 * Every call returns 0 (or a value) on success and -1 on error; the reason
 * is in DMI_errmsg() (a per-thread buffer whose address stays valid; the
 * text is that of the thread's last error) and errno: EFAULT for an address
 * outside every region, ERANGE for an access past a region's end, EINVAL
 * for a bad mode, size, function, NULL buffer or handle, ENOTCONN before
 * DMI_init or after DMI_finalize, EHOSTDOWN when a node failed, EIO when
 * start-up failed, ECHILD when a compute instance failed, ENOMEM when
 * every node's pool (DMI_POOL_PAGES) is full. DMI_rank and
 * DMI_size return -1 before DMI_init and leave the last error alone. A node that loses a peer prints which and exits with
 * status 3 (set DMI_ERRORS=return to get -1 from the calls instead).
 * Sequential consistency holds per page; an access spanning pages behaves
 * like separate concurrent accesses to each page.
 */
#ifndef DMI_H
#define DMI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* DMI_read modes (Fig. 3). */
#define DMI_INVALIDATE 0 /* cache the page; the next write invalidates it */
#define DMI_UPDATE     1 /* cache the page; every write updates it */
#define DMI_GET        2 /* fetch only the bytes asked for; cache nothing */
/* DMI_write modes (Fig. 4). */
#define DMI_EXCLUSIVE  3 /* become the page's owner, then write here */
#define DMI_PUT        4 /* send the bytes to the owner, which writes them */

/* The paper's short names, unless the program asks not to have them. */
#ifndef DMI_NO_SHORT_NAMES
#define INVALIDATE DMI_INVALIDATE
#define UPDATE     DMI_UPDATE
#define GET        DMI_GET
#define EXCLUSIVE  DMI_EXCLUSIVE
#define PUT        DMI_PUT
#endif

/* Built-in read-modify-write functions for DMI_atomic (little-endian int64):
 * fetch-and-add (arg: int64 delta) and compare-and-swap (arg: int64
 * expected, int64 desired); both give the old value (8 bytes). */
#define DMI_FETCH_ADD_INT64 0
#define DMI_CAS_INT64       1

int DMI_init(void);
int DMI_finalize(void);
int DMI_rank(void);
int DMI_size(void);
const char *DMI_errmsg(void);

/* A 4096-byte page, zero at start, that every node knows: rank 0 can store
 * the addresses of its DMI_mmap regions there for the others. */
int64_t DMI_root(void);

/* page_num pages of page_size bytes (the coherence unit); -1 on error. */
int64_t DMI_mmap(int64_t page_size, int64_t page_num);
int DMI_munmap(int64_t addr);

int DMI_read(int64_t addr, int64_t size, void *buf, int mode);
int DMI_write(int64_t addr, int64_t size, void *buf, int mode);

/* Scattered accesses, sent as one request per home node. */
typedef struct {
	int64_t addr;
	int64_t size;
	void *buf;
} DMI_access_t;
int DMI_group_read(DMI_access_t *accesses, int64_t num, int mode);
int DMI_group_write(DMI_access_t *accesses, int64_t num, int mode);

/* Asynchronous accesses: the data of a read is in buf after DMI_wait. */
typedef struct {
	void *p;
} DMI_handle_t;
int DMI_read_async(int64_t addr, int64_t size, void *buf, int mode, DMI_handle_t *handle);
int DMI_write_async(int64_t addr, int64_t size, void *buf, int mode, DMI_handle_t *handle);
int DMI_wait(DMI_handle_t *handle);

/* A mutex named by any global address (held at the home of its page). */
int DMI_mutex_lock(int64_t mutex_addr);
int DMI_mutex_unlock(int64_t mutex_addr);

/* Waits until every node reached it (called from DMI_itergroup: every
 * thread of the itergroup). */
int DMI_barrier(void);
/* Arrives at a barrier and returns; DMI_wait(handle) returns once every node
 * arrived. Wait on each before starting the next. */
int DMI_barrier_async(DMI_handle_t *handle);

/* User-defined read-modify-write run at the owner of [addr, addr+size),
 * which must lie in one page: func changes target in place and writes
 * size bytes of result. Register the same functions in the same order on
 * every node; DMI_rmw_register returns the id to pass to DMI_atomic. */
typedef void (*DMI_rmw_func_t)(void *target, int64_t size, const void *arg, int64_t arg_size,
			       void *result);
int DMI_rmw_register(DMI_rmw_func_t func);
int DMI_atomic(int64_t addr, int64_t size, const void *arg, int64_t arg_size, void *result,
	       int func);

/*
 * Reconfigurable programs (sec. 4, Figs. 6-9). Instead of main() and
 * DMI_init(), the program defines DMI_main and DMI_itergroup (and, for
 * DMI_check_rescale, DMI_judge_rescale) and includes <dmi_main.h> once,
 * which defines main(). Node 0 runs DMI_main(argc, argv); DMI_rescale
 * runs itergroups, one thread per node, until rank 0's DMI_itergroup
 * returns 0; nodes join and leave between itergroups (`dmi run -n N
 * --grow-at ITER:K --shrink-at ITER:K`, docs/dmi.md).
 */
typedef struct {
	int id;         /* the node's rank */
	int core_num;   /* itergroup threads it runs (1) */
	char host[64];  /* host:port */
} DMI_node_t;

void DMI_main(int argc, char **argv);
int DMI_itergroup(int rank, int pnum, int64_t addr);
int DMI_judge_rescale(DMI_node_t *in_nodes, DMI_node_t *out_nodes, DMI_node_t *cur_nodes,
		      int in_node_num, int out_node_num, int cur_node_num);

/* From DMI_main: run itergroups on init_node_num nodes first; addr (a
 * global address) is passed to every DMI_itergroup. 0, or -1 on error. */
int DMI_rescale(int64_t addr, int init_node_num);
/* From DMI_itergroup: 1 when DMI_judge_rescale says to end the itergroup
 * for the nodes joining and leaving now (without DMI_judge_rescale: when
 * any does), 0 to go on, -1 on error. */
int DMI_check_rescale(void);
/* What dmi_main.h's main() calls; judge may be NULL. Returns the exit
 * status. */
int DMI_run(int argc, char **argv, void (*main_fn)(int, char **),
	    int (*itergroup)(int, int, int64_t),
	    int (*judge)(DMI_node_t *, DMI_node_t *, DMI_node_t *, int, int, int));

/* Compute instances (half-process.txt Fig. 11): DMI_create forks an
 * instance running the program's DMI_thread(arg_addr) as a member of this
 * node's half-process set. An instance is a single-threaded process with
 * its own globals, libc state and private heap; its DMI calls reach the
 * node through a mailbox in the shared range. While a node has running
 * instances, DMI_barrier is for them (the node's program must not call
 * it): every running instance of every node must arrive, and a node's
 * barrier completes only once its program is done creating (waits in
 * DMI_join or called DMI_detach). DMI_join returns
 * 0 when DMI_thread returned 0, else -1 (another value, or the instance's
 * process was killed: the node also prints it and, unless
 * DMI_ERRORS=return, exits with status 3). Create instances from the
 * node's program only (not from an instance), after DMI_init, while no
 * other thread of it is inside a DMI call (the fork copies its locks);
 * register DMI_atomic functions before creating them. DMI_finalize is
 * refused in an instance. */
typedef struct {
	int64_t id;
} DMI_instance_t;
/* The paper's signature (half-process.txt Fig. 11): arg_addr is the
 * global address given to DMI_create; the instance's result is 0 for
 * success (see DMI_join). */
uint64_t DMI_thread(uint64_t arg_addr); /* defined by a program that uses DMI_create */
int DMI_create_func(DMI_instance_t *handle, uint64_t (*func)(uint64_t), int64_t arg_addr);
static inline int DMI_create(DMI_instance_t *handle, int64_t arg_addr)
{
	return DMI_create_func(handle, DMI_thread, arg_addr);
}
int DMI_join(DMI_instance_t handle);
int DMI_detach(DMI_instance_t handle);
/* In a compute instance: the point where its node may move it (it holds
 * no DMI call then). Returns 1 when it was moved (it runs on as another
 * process with the same globals, heap and stack), 0 when not (always in
 * the node's own program), -1 on error. Moves are scheduled with
 * DMI_MOVE_AT (docs/dmi-reconf.md, "DMI_yield"). */
int DMI_yield(void);

#ifdef __cplusplus
}
#endif

#endif /* DMI_H */
