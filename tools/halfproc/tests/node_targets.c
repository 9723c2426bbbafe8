/* Targets of the node daemon tests: MODE sets up one resource, then the
 * program prints COUNT numbered lines with some work between them and exits
 * with status 7. The output depends only on COUNT. With a third argument
 * "wait" it reads stdin to EOF before exiting (tests hold it running).
 *   plain   nothing
 *   socket  an unconnected unix socket (refused by migrate)
 *   pipe    a pipe to a process outside its tree that reads it (refused
 *           by migrate)
 *   child   a child process that waits to be killed (moves as a tree)
 *   zombie  a child process that exits at once, reaped only at the end
 *           (refused by migrate: a zombie cannot be carried)
 *   nodumpchild  a child process that makes itself not dumpable and
 *           waits to be killed; prints "ready" first, once it is
 *   thread  a second thread that sleeps (refused by migrate)
 *   nohup   SIGHUP and SIGPIPE ignored: a copy orphaned by a dead node
 *           would run on (the fault tests check that none does)
 *   mapfile FILE (fourth argument) mapped private and read-only at the
 *           start; a hash of its bytes is printed last
 *   nodump  prctl(PR_SET_DUMPABLE, 0): only root may read its memory;
 *           prints "ready" first, once it is not dumpable
 *   latenodump  prints "ready" first; makes itself not dumpable when a
 *           SIGUSR1 comes
 *   big     MIB (fourth argument) MiB of anonymous memory, every byte
 *           written at the start; checked last ("big ok" or "big BAD") */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void nodump(int sig)
{
	(void)sig;
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

static void *sleeper(void *arg)
{
	for (;;)
		pause();
	return arg;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "plain";
	long count = argc > 2 ? atol(argv[2]) : 100;
	int p[2] = { -1, -1 };
	pid_t child = -1;
	uint64_t h = 1469598103934665603ULL;
	const unsigned char *map = NULL;
	size_t maplen = 0;
	unsigned char *big = NULL;
	size_t biglen = 0;

	if (!strcmp(mode, "thread")) {
		pthread_t t;
		if (pthread_create(&t, NULL, sleeper, NULL))
			return 92;
	} else if (!strcmp(mode, "nohup")) {
		signal(SIGHUP, SIG_IGN);
		signal(SIGPIPE, SIG_IGN);
	} else if (!strcmp(mode, "child")) {
		child = fork();
		if (child == 0)
			for (;;)
				pause();
	} else if (!strcmp(mode, "zombie")) {
		child = fork();
		if (child == 0)
			_exit(0);
	} else if (!strcmp(mode, "nodumpchild")) {
		int q[2];
		char c;

		if (pipe(q))
			return 97;
		child = fork();
		if (child == 0) {
			if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0))
				_exit(95);
			write(q[1], "x", 1);
			for (;;)
				pause();
		}
		close(q[1]);
		if (read(q[0], &c, 1) != 1)
			return 98;
		close(q[0]);
		printf("ready\n");
		fflush(stdout);
	} else if (!strcmp(mode, "socket")) {
		if (socket(AF_UNIX, SOCK_STREAM, 0) < 0)
			return 90;
	} else if (!strcmp(mode, "mapfile")) {
		struct stat st;
		int fd = argc > 4 ? open(argv[4], O_RDONLY) : -1;

		if (fd < 0 || fstat(fd, &st))
			return 93;
		maplen = st.st_size;
		map = mmap(NULL, maplen, PROT_READ, MAP_PRIVATE, fd, 0);
		close(fd);
		if (map == MAP_FAILED)
			return 94;
	} else if (!strcmp(mode, "big")) {
		biglen = (argc > 4 ? (size_t)atol(argv[4]) : 256) << 20;
		big = mmap(NULL, biglen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (big == MAP_FAILED)
			return 96;
		for (size_t i = 0; i < biglen; i += 4096)
			memset(big + i, (int)(i >> 12) % 251 + 1, 4096);
	} else if (!strcmp(mode, "nodump")) {
		if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0))
			return 95;
		printf("ready\n");
		fflush(stdout);
	} else if (!strcmp(mode, "latenodump")) {
		struct sigaction sa;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = nodump;
		sa.sa_flags = SA_RESTART;
		if (sigaction(SIGUSR1, &sa, NULL))
			return 96;
		printf("ready\n");
		fflush(stdout);
	} else if (!strcmp(mode, "pipe")) {
		pid_t mid;

		/*
		 * The reader is a grandchild, orphaned at once: a process
		 * outside the tree (a pipe among the tree's own processes is
		 * carried with it).
		 */
		if (pipe(p))
			return 91;
		mid = fork();
		if (mid == 0) {
			if (fork() == 0) {
				char c;

				close(p[1]);
				while (read(p[0], &c, 1) > 0)
					;
			}
			_exit(0);
		}
		waitpid(mid, NULL, 0);
		close(p[0]);
	}
	for (long i = 0; i < count; i++) {
		for (long k = 0; k < 400000; k++) {
			h ^= (uint64_t)k;
			h *= 1099511628211ULL;
		}
		printf("tick %ld %016llx\n", i, (unsigned long long)h);
		fflush(stdout);
	}
	if (argc > 3 && !strcmp(argv[3], "wait"))
		while (getchar() != EOF)
			;
	if (big) {
		size_t bad = 0;

		for (size_t i = 0; i < biglen && !bad; i += 4096)
			for (size_t k = 0; k < 4096; k += 512)
				if (big[i + k] != (unsigned char)((i >> 12) % 251 + 1))
					bad = i + k + 1;
		if (bad)
			printf("big BAD at %zu\n", bad - 1);
		else
			printf("big ok\n");
	}
	if (map) {
		uint64_t s = 0;

		for (size_t i = 0; i < maplen; i++)
			s = s * 31 + map[i];
		printf("mapped %zu bytes, hash %016llx\n", maplen, (unsigned long long)s);
	}
	if (child > 0) {
		if (p[1] >= 0)
			close(p[1]);
		else
			kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	return 7;
}
