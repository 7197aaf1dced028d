/*
 * rsinterpose.c: a read interposer preloaded (LD_PRELOAD) into a PostgreSQL postmaster the
 * pytest-readstream harness starts, and so into every backend and I/O worker it forks.
 *
 * PostgreSQL reads relation data through pg_preadv() (src/include/port/pg_iovec.h), which calls
 * pread() for one iovec and preadv() for several; md.c's mdreadv() and the AIO paths of io_method
 * sync and worker (pgaio_io_perform_synchronously() in aio_io.c) all end there. This library
 * defines pread/preadv (and their 64-bit names) and passes each call to libc unchanged, unless
 * the harness's control area (rsinterpose.h) holds a rule for the file being read: the file is
 * identified by device and inode, so WAL, catalogs and every file the harness did not name can
 * never match. A matching request may be delayed (fixed or seeded latency, per-byte cost,
 * a limit of requests served at once), fail with EIO, come back short, hang until released (and
 * then succeed or fail), or come back with the rule's pages damaged so that page verification
 * fails on their checksum (the file is never written); every matched request is written to a
 * ledger the harness reads back.
 *
 * io_method=io_uring submits reads to the kernel without these calls. For it this library also
 * defines liburing's io_uring_submit() and io_uring_peek_batch_cqe(), the two functions
 * method_io_uring.c calls through liburing's shared library to submit and to reap (see "Reads
 * through io_uring" below): EIO, short reads, damaged pages and the ledger act there too; a
 * delay or a hang cannot (the kernel performs the read), and the harness refuses those rules.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <math.h>

#include "rsinterpose.h"

#define RSI_ENV "READSTREAM_INTERPOSE_CONTROL"
#define RSI_POLL_NS 200000		/* how often a hung or throttled request looks again */
#define RSI_SEQ_TRIES 20000		/* a rule rewrite takes microseconds; give up after ~1 s */

typedef ssize_t (*pread_fn) (int, void *, size_t, off_t);
typedef ssize_t (*preadv_fn) (int, const struct iovec *, int, off_t);
typedef uint16_t (*checksum_fn) (char *, uint32_t);

static pread_fn real_pread;
static preadv_fn real_preadv;
static RsiControl *ctl;

/*
 * The server's own pg_checksum_page() (storage/checksum.h), found in the postgres executable
 * this library is preloaded into (it exports its symbols for extensions): a damaged page is
 * checked against it, so its checksum is known to fail, whatever the page held.
 */
static checksum_fn server_checksum;
static int	server_checksum_looked;

/* Offsets in PageHeaderData (storage/bufpage.h), the same for every page layout version 4. */
#define RSI_PD_CHECKSUM 8
#define RSI_PD_LOWER 12
#define RSI_PD_UPPER 14
#define RSI_PD_SPECIAL 16
#define RSI_PD_PAGESIZE_VERSION 18
#define RSI_SIZE_OF_PAGE_HEADER 24
#define RSI_PAGE_LAYOUT_VERSION 4

/* A rule's settings as seen when the request was matched (copied under the sequence lock). */
typedef struct RsiMatch
{
	int			index;
	RsiRule		rule;
	uint32_t	first_block;
	uint32_t	nblocks;
} RsiMatch;

static void rsi_uring_init(void);

static void
rsi_resolve(void)
{
	if (real_pread == NULL)
		real_pread = (pread_fn) dlsym(RTLD_NEXT, "pread");
	if (real_preadv == NULL)
		real_preadv = (preadv_fn) dlsym(RTLD_NEXT, "preadv");
}

__attribute__((constructor))
static void
rsi_init(void)
{
	const char *path = getenv(RSI_ENV);
	struct stat st;
	void	   *area;
	int			fd;
	int32_t		zero = 0;

	rsi_resolve();
	if (path == NULL || path[0] == '\0')
		return;
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
	{
		fprintf(stderr, "readstream interposer: cannot open %s: %s; reads pass through\n",
				path, strerror(errno));
		return;
	}
	if (fstat(fd, &st) != 0 || st.st_size != (off_t) sizeof(RsiControl))
	{
		fprintf(stderr, "readstream interposer: %s is not a control area of %zu bytes; reads pass through\n",
				path, sizeof(RsiControl));
		close(fd);
		return;
	}
	area = mmap(NULL, sizeof(RsiControl), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (area == MAP_FAILED)
	{
		fprintf(stderr, "readstream interposer: cannot map %s: %s; reads pass through\n",
				path, strerror(errno));
		return;
	}
	if (((RsiControl *) area)->magic != RSI_MAGIC || ((RsiControl *) area)->version != RSI_VERSION)
	{
		fprintf(stderr, "readstream interposer: %s has another layout; reads pass through\n", path);
		munmap(area, sizeof(RsiControl));
		return;
	}
	ctl = (RsiControl *) area;
	/* The first process to map the area is the postmaster; the harness checks this pid. */
	__atomic_compare_exchange_n(&ctl->attached_pid, &zero, (int32_t) getpid(), 0,
								__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	rsi_uring_init();
}

static uint64_t
rsi_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

static void
rsi_sleep_until(uint64_t deadline_ns)
{
	static int	slack_set;
	struct timespec ts;

	/*
	 * Linux lets a sleep overrun by the thread's timer slack (50 us by default), which alone
	 * would add a quarter to a 0.2 ms latency. Set it to 1 ns in each process that delays a read
	 * (forked children inherit both the slack and this flag).
	 */
	if (!slack_set)
	{
		prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
		slack_set = 1;
	}

	ts.tv_sec = (time_t) (deadline_ns / 1000000000u);
	ts.tv_nsec = (long) (deadline_ns % 1000000000u);
	/* Signals (latch wake-ups, SIGALRM of statement_timeout) must not shorten the delay. */
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static void
rsi_sleep_ns(uint64_t ns)
{
	rsi_sleep_until(rsi_now_ns() + ns);
}

/* splitmix64: the k-th draw of a rule depends only on its seed and k, in whichever process. */
static uint64_t
rsi_mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static uint64_t
rsi_latency(RsiRule *shared, const RsiRule *rule)
{
	uint64_t	k;
	double		u;

	if (rule->dist == RSI_FIXED)
		return rule->latency_ns;
	k = __atomic_fetch_add(&shared->draws, 1, __ATOMIC_RELAXED);
	/* 53 random bits as a double in (0, 1) */
	u = ((double) (rsi_mix(rule->seed ^ rsi_mix(k)) >> 11) + 0.5) / 9007199254740992.0;
	if (rule->dist == RSI_UNIFORM)
		return rule->latency_ns + (uint64_t) (u * (double) (rule->latency_b_ns - rule->latency_ns));
	return (uint64_t) (-log(u) * (double) rule->latency_ns);
}

/* The rules matching a request, copied consistently; returns how many (at most RSI_MAX_RULES). */
static int
rsi_match(const struct stat *st, off_t offset, size_t len, RsiMatch *out)
{
	uint32_t	blcksz = ctl->blcksz ? ctl->blcksz : 8192;
	int			tries;

	for (tries = 0; tries < RSI_SEQ_TRIES; tries++)
	{
		uint64_t	s1 = __atomic_load_n(&ctl->seq, __ATOMIC_ACQUIRE);
		uint32_t	nrules;
		int			n = 0;

		if (s1 & 1)
		{
			rsi_sleep_ns(50000);
			continue;
		}
		nrules = ctl->nrules < RSI_MAX_RULES ? ctl->nrules : RSI_MAX_RULES;
		for (uint32_t i = 0; i < nrules; i++)
		{
			const RsiRule *r = &ctl->rules[i];
			uint32_t	nfiles = r->nfiles < RSI_MAX_FILES ? r->nfiles : RSI_MAX_FILES;

			if (!r->active)
				continue;
			for (uint32_t f = 0; f < nfiles; f++)
			{
				uint64_t	first;
				uint64_t	last;

				if (r->files[f].dev != (uint64_t) st->st_dev || r->files[f].ino != (uint64_t) st->st_ino)
					continue;
				first = r->files[f].first_block + (uint64_t) offset / blcksz;
				last = r->files[f].first_block + ((uint64_t) offset + (len ? len : 1) - 1) / blcksz;
				if (last < r->first_block || first > r->last_block)
					continue;
				out[n].index = (int) i;
				memcpy(&out[n].rule, r, sizeof(RsiRule));
				out[n].first_block = (uint32_t) first;
				out[n].nblocks = (uint32_t) (last - first + 1);
				n++;
				break;
			}
		}
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&ctl->seq, __ATOMIC_RELAXED) == s1)
			return n;
	}
	return 0;
}

/* Claim one firing of a rule that fires at most `times` times. */
static int
rsi_claim(RsiRule *shared, uint32_t times)
{
	uint64_t	cur = __atomic_load_n(&shared->fired, __ATOMIC_RELAXED);

	if (times == 0)
	{
		__atomic_fetch_add(&shared->fired, 1, __ATOMIC_RELAXED);
		return 1;
	}
	while (cur < times)
	{
		if (__atomic_compare_exchange_n(&shared->fired, &cur, cur + 1, 0,
										__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			return 1;
	}
	return 0;
}

static void
rsi_acquire_slot(RsiRule *shared, uint32_t limit)
{
	for (;;)
	{
		uint32_t	cur = __atomic_load_n(&shared->inflight, __ATOMIC_RELAXED);

		if (cur < limit &&
			__atomic_compare_exchange_n(&shared->inflight, &cur, cur + 1, 0,
										__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			return;
		rsi_sleep_ns(20000);
	}
}

/* One ledger entry, for a request process `pid` issued. */
static void
rsi_ledger_of(int32_t pid, const RsiMatch *m, int fired, uint32_t action, int64_t result,
			  size_t asked, uint64_t delay_ns, uint64_t start_ns, uint64_t end_ns)
{
	uint64_t	idx = __atomic_fetch_add(&ctl->ledger_next, 1, __ATOMIC_ACQ_REL);
	RsiEntry   *e = &ctl->ledger[idx % RSI_LEDGER_CAP];

	__atomic_store_n(&e->seq, 0, __ATOMIC_RELEASE);
	e->pid = pid;
	e->rule = m->index;
	e->action = action;
	e->fired = (uint32_t) fired;
	e->first_block = m->first_block;
	e->nblocks = m->nblocks;
	e->result = result;
	e->asked = asked;
	e->delay_ns = delay_ns;
	e->start_ns = start_ns;
	e->end_ns = end_ns;
	__atomic_store_n(&e->seq, idx + 1, __ATOMIC_RELEASE);
}

static void
rsi_ledger(const RsiMatch *m, int fired, uint32_t action, int64_t result, size_t asked,
		   uint64_t delay_ns, uint64_t start_ns, uint64_t end_ns)
{
	rsi_ledger_of((int32_t) getpid(), m, fired, action, result, asked, delay_ns, start_ns, end_ns);
}

/* Bytes a short read returns: up to the faulty block, or the rule's partial amount. */
static size_t
rsi_short_len(const RsiMatch *m, off_t offset, size_t len, uint32_t blcksz)
{
	size_t		keep;

	if (m->first_block < m->rule.first_block)
		keep = (size_t) (m->rule.first_block - m->first_block) * blcksz - (size_t) (offset % blcksz);
	else
		keep = m->rule.short_bytes;
	return keep < len ? keep : len;
}

static uint16_t
rsi_get16(const unsigned char *page, int off)
{
	uint16_t	v;

	memcpy(&v, page + off, sizeof(v));
	return v;
}

static void
rsi_put16(unsigned char *page, int off, uint16_t v)
{
	memcpy(page + off, &v, sizeof(v));
}

/*
 * Damage one page as read so that PageIsVerified() (bufpage.c) fails on its checksum alone: the
 * header stays sane, so ignore_checksum_failure lets the page through as read and
 * zero_damaged_pages zeroes it. A new page (pd_upper 0, as an all-zero page is) would be checked
 * for being all zeroes instead of its checksum, so it first gets an empty page's header
 * (PageInit: pd_lower after the header, pd_upper and pd_special at the end) with checksum 0,
 * which pg_checksum_page() never returns. Then a byte in the middle of the page is inverted, and
 * the next ones while the server's pg_checksum_page() still agrees with pd_checksum.
 */
static void
rsi_corrupt_page(unsigned char *page, uint32_t blcksz, uint32_t blkno)
{
	uint32_t	at = blcksz / 2;

	if (rsi_get16(page, RSI_PD_UPPER) == 0)
	{
		memset(page, 0, RSI_SIZE_OF_PAGE_HEADER);
		rsi_put16(page, RSI_PD_LOWER, RSI_SIZE_OF_PAGE_HEADER);
		rsi_put16(page, RSI_PD_UPPER, (uint16_t) blcksz);
		rsi_put16(page, RSI_PD_SPECIAL, (uint16_t) blcksz);
		rsi_put16(page, RSI_PD_PAGESIZE_VERSION, (uint16_t) (blcksz | RSI_PAGE_LAYOUT_VERSION));
	}
	if (!server_checksum_looked)
	{
		server_checksum = (checksum_fn) dlsym(RTLD_DEFAULT, "pg_checksum_page");
		server_checksum_looked = 1;
	}
	page[at] ^= 0xFF;
	while (server_checksum != NULL && at + 1 < blcksz &&
		   server_checksum((char *) page, blkno) == rsi_get16(page, RSI_PD_CHECKSUM))
		page[++at] ^= 0xFF;
}

/*
 * Copy one page between `page` and the request's iovecs, starting `from` bytes into iovec `i`:
 * out of them (`out` = 1) or back into them (`out` = 0). A page may span iovecs.
 */
static void
rsi_page_copy(const struct iovec *iov, int iovcnt, int i, size_t from, unsigned char *page,
			  uint32_t blcksz, int out)
{
	size_t		done = 0;

	for (int j = i; j < iovcnt && done < blcksz; j++)
	{
		unsigned char *at = (unsigned char *) iov[j].iov_base + (j == i ? from : 0);
		size_t		n = iov[j].iov_len - (j == i ? from : 0);

		if (n > blcksz - done)
			n = blcksz - done;
		if (out)
			memcpy(page + done, at, n);
		else
			memcpy(at, page + done, n);
		done += n;
	}
}

/*
 * Damage the pages of blocks [first, last] that a read of `got` bytes at `offset` returned
 * whole. A page may span iovecs, so it is copied out and back.
 */
static void
rsi_corrupt(const struct iovec *iov, int iovcnt, off_t offset, size_t got, uint32_t file_first,
			uint32_t first, uint32_t last, uint32_t blcksz)
{
	unsigned char page[32768];	/* BLCKSZ is at most 32 kB */
	uint64_t	begin = (uint64_t) offset;
	uint64_t	end = (uint64_t) offset + got;

	if (blcksz > sizeof(page))
		return;
	if (begin % blcksz != 0)
		begin += blcksz - begin % blcksz;	/* a request that starts inside a page */
	for (uint64_t p = begin; p + blcksz <= end; p += blcksz)
	{
		uint64_t	blk = file_first + p / blcksz;
		uint64_t	rel = p - (uint64_t) offset;	/* the page's offset in the request */
		uint64_t	pos = 0;	/* the request's bytes before iovec i */
		int			i = 0;

		if (blk < first || blk > last)
			continue;
		while (i < iovcnt && pos + iov[i].iov_len <= rel)
			pos += iov[i++].iov_len;
		rsi_page_copy(iov, iovcnt, i, (size_t) (rel - pos), page, blcksz, 1);
		rsi_corrupt_page(page, blcksz, (uint32_t) blk);
		rsi_page_copy(iov, iovcnt, i, (size_t) (rel - pos), page, blcksz, 0);
	}
}

static ssize_t
rsi_do_read(int fd, const struct iovec *iov, int iovcnt, off_t offset, size_t limit)
{
	struct iovec cut[1024];		/* IOV_MAX on Linux */
	size_t		left = limit;
	int			n = 0;

	if (limit == (size_t) -1)
		return iovcnt == 1 ? real_pread(fd, iov[0].iov_base, iov[0].iov_len, offset)
			: real_preadv(fd, iov, iovcnt, offset);
	if (limit == 0)
		return 0;
	for (int i = 0; i < iovcnt && left > 0 && n < 1024; i++)
	{
		cut[n].iov_base = iov[i].iov_base;
		cut[n].iov_len = iov[i].iov_len < left ? iov[i].iov_len : left;
		left -= cut[n].iov_len;
		n++;
	}
	return real_preadv(fd, cut, n, offset);
}

static ssize_t
rsi_read(int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
	RsiMatch	matches[RSI_MAX_RULES];
	struct stat st;
	size_t		asked = 0;
	size_t		limit = (size_t) -1;
	uint64_t	start;
	uint64_t	end;
	uint64_t	delay = 0;
	int			fired[RSI_MAX_RULES];
	int			slots[RSI_MAX_RULES];
	int			n;
	int			outcome = -1;	/* index into matches of the rule whose action applies */
	ssize_t		result;
	int			saved_errno;

	rsi_resolve();
	if (ctl == NULL || !__atomic_load_n(&ctl->enabled, __ATOMIC_RELAXED) || iovcnt < 1)
		return rsi_do_read(fd, iov, iovcnt, offset, (size_t) -1);
	__atomic_fetch_add(&ctl->seen, 1, __ATOMIC_RELAXED);
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		return rsi_do_read(fd, iov, iovcnt, offset, (size_t) -1);
	for (int i = 0; i < iovcnt; i++)
		asked += iov[i].iov_len;
	n = rsi_match(&st, offset, asked, matches);
	if (n == 0)
		return rsi_do_read(fd, iov, iovcnt, offset, (size_t) -1);
	__atomic_fetch_add(&ctl->matched, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < n; i++)
	{
		RsiRule    *shared = &ctl->rules[matches[i].index];
		const RsiRule *r = &matches[i].rule;
		uint64_t	k = __atomic_add_fetch(&shared->matched, 1, __ATOMIC_ACQ_REL);

		fired[i] = 0;
		slots[i] = 0;
		if (r->nth != 0 && k != r->nth)
			continue;
		if ((r->action == RSI_HANG || r->action == RSI_HANG_EIO) &&
			__atomic_load_n(&shared->released, __ATOMIC_ACQUIRE))
			continue;
		if (r->action == RSI_SHORT)
		{
			size_t		keep = rsi_short_len(&matches[i], offset, asked, ctl->blcksz);

			/* Nothing to cut, or nothing left (0 bytes is end of file, another fault): the
			 * rule stays armed for a later request, as the model's short_read does. */
			if (keep >= asked || keep == 0)
				continue;
		}
		if (!rsi_claim(shared, r->times))
			continue;
		fired[i] = 1;
		delay += rsi_latency(shared, r) + (uint64_t) ((asked * r->ps_per_byte) / 1000u);
		/* Damaging pages goes with any outcome: it acts on what the read returned. */
		if (outcome < 0 && r->action != RSI_DELAY && r->action != RSI_CORRUPT)
			outcome = i;
	}
	/* Rules are visited in index order, so two requests never wait for each other's slots. */
	for (int i = 0; i < n; i++)
	{
		if (fired[i] && matches[i].rule.max_inflight > 0)
		{
			rsi_acquire_slot(&ctl->rules[matches[i].index], matches[i].rule.max_inflight);
			slots[i] = 1;
		}
	}
	/* The ledger's start is the service start, after any wait for a slot. */
	start = rsi_now_ns();
	if (delay > 0)
		rsi_sleep_until(start + delay);
	if (outcome >= 0 && (matches[outcome].rule.action == RSI_HANG ||
						 matches[outcome].rule.action == RSI_HANG_EIO))
	{
		RsiRule    *shared = &ctl->rules[matches[outcome].index];

		/* Like a device that stopped answering: uninterruptible until the harness releases it
		 * (or removes the rule); signals are handled by PostgreSQL once the read returns. */
		while (!__atomic_load_n(&shared->released, __ATOMIC_ACQUIRE) &&
			   __atomic_load_n(&shared->active, __ATOMIC_ACQUIRE))
			rsi_sleep_ns(RSI_POLL_NS);
	}
	if (outcome >= 0 && (matches[outcome].rule.action == RSI_EIO ||
						 matches[outcome].rule.action == RSI_HANG_EIO))
	{
		result = -1;
		saved_errno = EIO;
	}
	else
	{
		if (outcome >= 0 && matches[outcome].rule.action == RSI_SHORT)
			limit = rsi_short_len(&matches[outcome], offset, asked, ctl->blcksz);
		result = rsi_do_read(fd, iov, iovcnt, offset, limit);
		saved_errno = errno;
		for (int i = 0; i < n && result > 0; i++)
		{
			uint32_t	blcksz = ctl->blcksz ? ctl->blcksz : 8192;

			if (fired[i] && matches[i].rule.action == RSI_CORRUPT)
				rsi_corrupt(iov, iovcnt, offset, (size_t) result,
							matches[i].first_block - (uint32_t) ((uint64_t) offset / blcksz),
							matches[i].rule.first_block, matches[i].rule.last_block, blcksz);
		}
	}
	/* The end is taken before the slots are given back, so the service intervals of a rule
	 * limited to k requests at once never show more than k overlapping. */
	end = rsi_now_ns();
	for (int i = n - 1; i >= 0; i--)
	{
		if (slots[i])
			__atomic_fetch_sub(&ctl->rules[matches[i].index].inflight, 1, __ATOMIC_ACQ_REL);
	}
	{
		for (int i = 0; i < n; i++)
			rsi_ledger(&matches[i], fired[i],
					   fired[i] ? matches[i].rule.action : RSI_DELAY,
					   result < 0 ? -(int64_t) saved_errno : (int64_t) result,
					   asked, delay, start, end);
	}
	errno = saved_errno;
	return result;
}

ssize_t
pread(int fd, void *buf, size_t count, off_t offset)
{
	struct iovec one;

	one.iov_base = buf;
	one.iov_len = count;
	return rsi_read(fd, &one, 1, offset);
}

ssize_t
pread64(int fd, void *buf, size_t count, off_t offset)
{
	return pread(fd, buf, count, offset);
}

ssize_t
preadv(int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
	return rsi_read(fd, iov, iovcnt, offset);
}

ssize_t
preadv64(int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
	return rsi_read(fd, iov, iovcnt, offset);
}


/*
 * Reads through io_uring (io_method=io_uring, method_io_uring.c).
 *
 * pgaio_uring_submit() fills SQEs with liburing's inline io_uring_get_sqe()/io_uring_prep_read()/
 * io_uring_prep_readv(), setting user_data to the PgAioHandle, then calls io_uring_submit();
 * pgaio_uring_drain_locked() reaps with io_uring_peek_batch_cqe() and hands cqe->res to
 * pgaio_io_process_completion(), possibly in another backend than the submitter (any process
 * holding the ring's completion_lock). Both calls go through liburing.so's PLT, so they are
 * defined here and forwarded (dlsym RTLD_NEXT, looked up on first use: a server without
 * liburing never calls them).
 *
 * At submission the SQEs not yet handed to the kernel (sq.sqe_head .. sq.sqe_tail) are matched
 * against the rules like a pread of the same file, offset and length; a matched read is recorded
 * in a table shared by every process of the server (mapped in the postmaster before it forks),
 * keyed by user_data, with the rules it matched, which ones fired and its iovecs. At completion
 * each reaped CQE whose user_data is recorded gets its outcome before PostgreSQL sees it: EIO
 * sets res to -EIO, a short read cuts res (PostgreSQL then reads the rest itself), corrupt
 * damages the returned pages in the (shared) buffers with the pread path's rsi_corrupt(); the
 * ledger entries are written then, with the submitter's pid, the submission as start and the
 * completion as end. A delay or a hang is not applied: the kernel performs the read, and holding
 * the reaper would delay every completion it reaps, not this read.
 *
 * The layouts below are liburing 2.x's public structures (liburing.h) and the kernel's SQE and
 * CQE (linux/io_uring.h), declared here so the library builds without liburing's headers. Only
 * the fields up to sqe_tail of struct io_uring_sq are used (the same in every liburing 2.x).
 * PostgreSQL sets neither IORING_SETUP_SQE128 nor IORING_SETUP_CQE32, so SQEs are 64 bytes.
 */
#define RSI_URING_OP_READV 1	/* IORING_OP_READV */
#define RSI_URING_OP_READ 22	/* IORING_OP_READ */
#define RSI_URING_PENDING 256	/* matched reads in flight at once, over all processes */
#define RSI_URING_MAX_IOV 128	/* PG_IOV_MAX (port/pg_iovec.h) is at most 128 */

typedef struct RsiUringSqe
{
	uint8_t		opcode;
	uint8_t		flags;
	uint16_t	ioprio;
	int32_t		fd;
	uint64_t	off;
	uint64_t	addr;
	uint32_t	len;
	uint32_t	rw_flags;
	uint64_t	user_data;
	uint64_t	pad[3];
} RsiUringSqe;

typedef struct RsiUringCqe
{
	uint64_t	user_data;
	int32_t		res;
	uint32_t	flags;
} RsiUringCqe;

/* The head of liburing's struct io_uring: its struct io_uring_sq up to sqe_tail. */
typedef struct RsiUringRing
{
	unsigned   *khead;
	unsigned   *ktail;
	unsigned   *kring_mask;
	unsigned   *kring_entries;
	unsigned   *kflags;
	unsigned   *kdropped;
	unsigned   *array;
	RsiUringSqe *sqes;
	unsigned	sqe_head;
	unsigned	sqe_tail;
} RsiUringRing;

/* One matched read submitted through io_uring and not yet reaped. */
typedef struct RsiPending
{
	uint64_t	user_data;		/* 0: free; RSI_PENDING_BUSY: being filled or emptied */
	int32_t		pid;			/* the submitter */
	int32_t		nmatch;
	int32_t		outcome;		/* index into match of the rule whose EIO/short applies, or -1 */
	int32_t		iovcnt;
	uint64_t	offset;
	uint64_t	asked;
	uint64_t	start_ns;
	size_t		keep;			/* bytes a short read returns */
	RsiMatch	match[RSI_MAX_RULES];
	int32_t		fired[RSI_MAX_RULES];
	struct iovec iov[RSI_URING_MAX_IOV];
} RsiPending;

#define RSI_PENDING_BUSY UINT64_MAX

typedef int (*uring_submit_fn) (void *);
typedef unsigned (*uring_peek_fn) (void *, void **, unsigned);

static uring_submit_fn real_uring_submit;
static uring_peek_fn real_uring_peek;
static RsiPending *pending;		/* RSI_URING_PENDING entries, shared by every server process */
static uint32_t *npending;		/* entries in use (atomic): 0 lets completions pass untouched */

static void
rsi_uring_init(void)
{
	size_t		size = sizeof(uint64_t) + sizeof(RsiPending) * RSI_URING_PENDING;
	void	   *area;

	/* Anonymous and shared: the postmaster's children inherit it, nothing else sees it. */
	area = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (area == MAP_FAILED)
	{
		fprintf(stderr, "readstream interposer: cannot map the io_uring table: %s; io_uring reads pass through\n",
				strerror(errno));
		return;
	}
	npending = (uint32_t *) area;
	pending = (RsiPending *) ((char *) area + sizeof(uint64_t));
}

/* Record one SQE's read if a rule matches it (the pread path's decisions, without a delay). */
static void
rsi_uring_record(const RsiUringSqe *sqe)
{
	RsiMatch	matches[RSI_MAX_RULES];
	struct stat st;
	const struct iovec *iov;
	struct iovec one;
	int			iovcnt;
	size_t		asked = 0;
	int			n;
	RsiPending *p = NULL;
	uint32_t	blcksz = ctl->blcksz ? ctl->blcksz : 8192;

	if (sqe->opcode == RSI_URING_OP_READ)
	{
		one.iov_base = (void *) (uintptr_t) sqe->addr;
		one.iov_len = sqe->len;
		iov = &one;
		iovcnt = 1;
	}
	else if (sqe->opcode == RSI_URING_OP_READV)
	{
		iov = (const struct iovec *) (uintptr_t) sqe->addr;
		iovcnt = (int) sqe->len;
	}
	else
		return;
	if (sqe->user_data == 0 || sqe->user_data == RSI_PENDING_BUSY || iovcnt < 1 ||
		iovcnt > RSI_URING_MAX_IOV)
		return;
	__atomic_fetch_add(&ctl->seen, 1, __ATOMIC_RELAXED);
	if (fstat(sqe->fd, &st) != 0 || !S_ISREG(st.st_mode))
		return;
	for (int i = 0; i < iovcnt; i++)
		asked += iov[i].iov_len;
	n = rsi_match(&st, (off_t) sqe->off, asked, matches);
	if (n == 0)
		return;
	/* A slot first: a read that cannot be recorded must not count as fired. */
	for (int i = 0; i < RSI_URING_PENDING && p == NULL; i++)
	{
		uint64_t	free_slot = 0;

		if (__atomic_compare_exchange_n(&pending[i].user_data, &free_slot, RSI_PENDING_BUSY, 0,
										__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			p = &pending[i];
	}
	if (p == NULL)
	{
		fprintf(stderr, "readstream interposer: more than %d matched io_uring reads in flight; "
				"this one passes untouched\n", RSI_URING_PENDING);
		return;
	}
	__atomic_fetch_add(&ctl->matched, 1, __ATOMIC_RELAXED);
	p->pid = (int32_t) getpid();
	p->nmatch = n;
	p->outcome = -1;
	p->iovcnt = iovcnt;
	p->offset = sqe->off;
	p->asked = asked;
	p->start_ns = rsi_now_ns();
	p->keep = asked;
	memcpy(p->iov, iov, sizeof(struct iovec) * (size_t) iovcnt);
	for (int i = 0; i < n; i++)
	{
		RsiRule    *shared = &ctl->rules[matches[i].index];
		const RsiRule *r = &matches[i].rule;
		uint64_t	k = __atomic_add_fetch(&shared->matched, 1, __ATOMIC_ACQ_REL);
		size_t		keep = asked;

		p->match[i] = matches[i];
		p->fired[i] = 0;
		if (r->nth != 0 && k != r->nth)
			continue;
		/* The harness refuses these under io_uring; a rule of them never fires here. */
		if (r->action == RSI_HANG || r->action == RSI_HANG_EIO)
			continue;
		if (r->action == RSI_SHORT)
		{
			keep = rsi_short_len(&matches[i], (off_t) sqe->off, asked, blcksz);

			if (keep >= asked || keep == 0)
				continue;
		}
		if (!rsi_claim(shared, r->times))
			continue;
		p->fired[i] = 1;
		if (p->outcome < 0 && (r->action == RSI_EIO || r->action == RSI_SHORT))
		{
			p->outcome = i;
			if (r->action == RSI_SHORT)
				p->keep = keep;
		}
	}
	__atomic_fetch_add(npending, 1, __ATOMIC_ACQ_REL);
	__atomic_store_n(&p->user_data, sqe->user_data, __ATOMIC_RELEASE);
}

/*
 * PostgreSQL submits a handle again only after its last completion was reaped, so an entry still
 * recorded under the same user_data is stale (its completion was lost: a crash and restart of
 * the backends keeps the postmaster and this table); drop it before it meets another read.
 */
static void
rsi_uring_forget(uint64_t user_data)
{
	for (int i = 0; i < RSI_URING_PENDING; i++)
	{
		uint64_t	want = user_data;

		if (__atomic_load_n(&pending[i].user_data, __ATOMIC_ACQUIRE) == want &&
			__atomic_compare_exchange_n(&pending[i].user_data, &want, 0, 0,
										__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			__atomic_fetch_sub(npending, 1, __ATOMIC_ACQ_REL);
	}
}

int
io_uring_submit(void *ring)
{
	if (real_uring_submit == NULL)
		real_uring_submit = (uring_submit_fn) dlsym(RTLD_NEXT, "io_uring_submit");
	if (real_uring_submit == NULL)
		return -ENOSYS;
	if (ctl != NULL && pending != NULL)
	{
		RsiUringRing *r = (RsiUringRing *) ring;
		unsigned	mask = *r->kring_mask;
		int			on = __atomic_load_n(&ctl->enabled, __ATOMIC_RELAXED) != 0;

		for (unsigned i = r->sqe_head; i != r->sqe_tail; i++)
		{
			const RsiUringSqe *sqe = &r->sqes[i & mask];

			if (__atomic_load_n(npending, __ATOMIC_ACQUIRE) > 0 && sqe->user_data != 0 &&
				sqe->user_data != RSI_PENDING_BUSY)
				rsi_uring_forget(sqe->user_data);
			if (on)
				rsi_uring_record(sqe);
		}
	}
	return real_uring_submit(ring);
}

/* Apply a recorded read's outcome to its CQE, write its ledger entries, free its entry. */
static void
rsi_uring_complete(RsiPending *p, RsiUringCqe *cqe)
{
	uint32_t	blcksz = ctl->blcksz ? ctl->blcksz : 8192;
	int			eio = p->outcome >= 0 && p->match[p->outcome].rule.action == RSI_EIO;
	uint64_t	end;

	if (eio)
		cqe->res = -EIO;
	else if (p->outcome >= 0 && cqe->res > 0 && (size_t) cqe->res > p->keep)
		cqe->res = (int32_t) p->keep;
	if (!eio && cqe->res > 0)
	{
		for (int i = 0; i < p->nmatch; i++)
		{
			if (p->fired[i] && p->match[i].rule.action == RSI_CORRUPT)
				rsi_corrupt(p->iov, p->iovcnt, (off_t) p->offset, (size_t) cqe->res,
							p->match[i].first_block - (uint32_t) (p->offset / blcksz),
							p->match[i].rule.first_block, p->match[i].rule.last_block, blcksz);
		}
	}
	end = rsi_now_ns();
	for (int i = 0; i < p->nmatch; i++)
		rsi_ledger_of(p->pid, &p->match[i], p->fired[i],
					  p->fired[i] ? p->match[i].rule.action : RSI_DELAY,
					  (int64_t) cqe->res, p->asked, 0, p->start_ns, end);
	__atomic_store_n(&p->user_data, 0, __ATOMIC_RELEASE);
	__atomic_fetch_sub(npending, 1, __ATOMIC_ACQ_REL);
}

unsigned
io_uring_peek_batch_cqe(void *ring, void **cqes, unsigned count)
{
	unsigned	got;

	if (real_uring_peek == NULL)
		real_uring_peek = (uring_peek_fn) dlsym(RTLD_NEXT, "io_uring_peek_batch_cqe");
	if (real_uring_peek == NULL)
		return 0;
	got = real_uring_peek(ring, cqes, count);
	/* Recorded reads complete even if the rules were paused or removed since their submission. */
	if (ctl == NULL || pending == NULL || __atomic_load_n(npending, __ATOMIC_ACQUIRE) == 0)
		return got;
	for (unsigned c = 0; c < got; c++)
	{
		RsiUringCqe *cqe = (RsiUringCqe *) cqes[c];

		for (int i = 0; i < RSI_URING_PENDING; i++)
		{
			uint64_t	want = cqe->user_data;

			/* Taking the entry (BUSY) makes sure only one reaper applies it. */
			if (want != 0 && want != RSI_PENDING_BUSY &&
				__atomic_load_n(&pending[i].user_data, __ATOMIC_ACQUIRE) == want &&
				__atomic_compare_exchange_n(&pending[i].user_data, &want, RSI_PENDING_BUSY, 0,
											__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			{
				rsi_uring_complete(&pending[i], cqe);
				break;
			}
		}
	}
	return got;
}
