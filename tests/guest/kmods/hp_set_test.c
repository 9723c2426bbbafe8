// SPDX-License-Identifier: GPL-2.0
/*
 * hp_set_test: test-only. Looks at a member's set from inside the kernel,
 * for the guest test hp_settest, where no system call can:
 *
 * - what a reader handed the set mm by mistake would find (patch 0017:
 *   not dumpable, owned by the initial user namespace, MMF_OOM_SKIP);
 * - what halfproc_install() does when asked to install the set's tables
 *   into a member that has them already (patch 0029: warn once, -EBUSY,
 *   nothing touched).  The module never does that, so only a test-only
 *   caller can reach it.
 *
 * Never built into a normal kernel or module.
 *
 * /sys/kernel/debug/hp_set_test/
 *   probe      write a member's pid: record its set mm's state in "setmm"
 *   setmm      "dumpable D init_user_ns 0|1 oom_skip 0|1", or the negative
 *              errno of the last probe (-ESRCH, -EINVAL: not a member)
 *   reinstall  write a member's pid: call halfproc_install() on it again
 *   result     the last reinstall's return value (0 or a negative errno)
 *   calls      how many reinstalls were made since the module loaded
 */
#include <linux/debugfs.h>
#include <linux/fs.h>
#include <linux/halfproc.h>
#include <linux/mmap_lock.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pid.h>
#include <linux/sched/coredump.h>
#include <linux/sched/mm.h>
#include <linux/seq_file.h>
#include <linux/user_namespace.h>

#include "hp_pid_mm.h"

static DEFINE_MUTEX(lock);		/* everything below */
static int probe_err = -ENODATA;	/* 0 once a probe succeeded */
static int dumpable, init_ns, oom_skip;	/* the last probe's set mm */
static int result = -ENODATA;
static unsigned long calls;
static struct dentry *dir;

/*
 * The mm of the task with pid @nr, with mm_users held: while it is held the
 * mm stays a member and its set, set mm included, stays alive (a member
 * leaves its set only when its mm is torn down).
 */
static struct mm_struct *member_mm(pid_t nr)
{
	struct mm_struct *mm = hp_pid_mm(nr);

	if (IS_ERR(mm))
		return mm;
	if (!halfproc_member_set_mm(mm)) {
		mmput(mm);
		return ERR_PTR(-EINVAL);
	}
	return mm;
}

static int probe_locked(pid_t nr)
{
	struct mm_struct *mm = member_mm(nr), *set_mm;

	if (IS_ERR(mm))
		return PTR_ERR(mm);
	set_mm = halfproc_member_set_mm(mm);
	dumpable = get_dumpable(set_mm);
	init_ns = set_mm->user_ns == &init_user_ns;
	oom_skip = test_bit(MMF_OOM_SKIP, &set_mm->flags);
	mmput(mm);
	return 0;
}

static int reinstall_locked(pid_t nr)
{
	struct mm_struct *mm = member_mm(nr);
	int ret;

	if (IS_ERR(mm))
		return PTR_ERR(mm);
	/* The module's own context for halfproc_install(): mmap lock held. */
	mmap_write_lock(mm);
	ret = halfproc_install(mm, halfproc_member_set_mm(mm));
	mmap_write_unlock(mm);
	mmput(mm);
	return ret;
}

static ssize_t pid_write(const char __user *buf, size_t len, bool install)
{
	int nr, ret;

	ret = kstrtoint_from_user(buf, len, 10, &nr);
	if (ret)
		return ret;
	if (nr <= 0)
		return -EINVAL;
	mutex_lock(&lock);
	if (install) {
		calls++;
		result = reinstall_locked(nr);
	} else {
		probe_err = probe_locked(nr);
	}
	mutex_unlock(&lock);
	return len;
}

static ssize_t probe_write(struct file *file, const char __user *buf,
			   size_t len, loff_t *ppos)
{
	return pid_write(buf, len, false);
}

static ssize_t reinstall_write(struct file *file, const char __user *buf,
			       size_t len, loff_t *ppos)
{
	return pid_write(buf, len, true);
}

static const struct file_operations probe_fops = {
	.owner = THIS_MODULE,
	.write = probe_write,
};

static const struct file_operations reinstall_fops = {
	.owner = THIS_MODULE,
	.write = reinstall_write,
};

static int setmm_show(struct seq_file *m, void *v)
{
	mutex_lock(&lock);
	if (probe_err)
		seq_printf(m, "%d\n", probe_err);
	else
		seq_printf(m, "dumpable %d init_user_ns %d oom_skip %d\n",
			   dumpable, init_ns, oom_skip);
	mutex_unlock(&lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(setmm);

static int result_get(void *data, u64 *val)
{
	mutex_lock(&lock);
	*val = (u64)(s64)result;
	mutex_unlock(&lock);
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(result_fops, result_get, NULL, "%lld\n");

static int calls_get(void *data, u64 *val)
{
	mutex_lock(&lock);
	*val = calls;
	mutex_unlock(&lock);
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(calls_fops, calls_get, NULL, "%llu\n");

static int __init hp_set_test_init(void)
{
	dir = debugfs_create_dir("hp_set_test", NULL);
	if (IS_ERR(dir))
		return PTR_ERR(dir);
	debugfs_create_file("probe", 0200, dir, NULL, &probe_fops);
	debugfs_create_file("setmm", 0444, dir, NULL, &setmm_fops);
	debugfs_create_file("reinstall", 0200, dir, NULL, &reinstall_fops);
	debugfs_create_file("result", 0444, dir, NULL, &result_fops);
	debugfs_create_file("calls", 0444, dir, NULL, &calls_fops);
	return 0;
}

static void __exit hp_set_test_exit(void)
{
	debugfs_remove_recursive(dir);
}

module_init(hp_set_test_init);
module_exit(hp_set_test_exit);
MODULE_DESCRIPTION("halfproc test only: a set mm's fail-closed state, a second install");
MODULE_LICENSE("GPL");
