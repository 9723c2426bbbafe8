// SPDX-License-Identifier: GPL-2.0
/*
 * hp_mn_test: test-only. A stand-in for a secondary MMU (KVM, an IOMMU in
 * SVA mode): an mmu notifier with invalidate_range_start on the mm of a
 * chosen process, counting the invalidations it hears, so that the guest
 * test hp_notifier can show what such a mirror sees on a half-process
 * member. Never built into a normal kernel or module.
 *
 * /sys/kernel/debug/hp_mn_test/
 *   pid      write a pid to register on its mm; write 0 to unregister
 *   result   0, or the negative errno of the last registration
 *   count    invalidate_range_start calls since the last registration
 */
#include <linux/atomic.h>
#include <linux/debugfs.h>
#include <linux/fs.h>
#include <linux/mmu_notifier.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pid.h>
#include <linux/sched/mm.h>

#include "hp_pid_mm.h"

static DEFINE_MUTEX(lock);		/* registration state below */
static struct mmu_notifier mn;
static struct mm_struct *registered;	/* the mm mn is on, or NULL */
static int result;
static atomic_long_t count;
static struct dentry *dir;

static int mn_start(struct mmu_notifier *sub,
		    const struct mmu_notifier_range *range)
{
	atomic_long_inc(&count);
	return 0;
}

static const struct mmu_notifier_ops mn_ops = {
	.invalidate_range_start = mn_start,
};

static void unregister_locked(void)
{
	if (!registered)
		return;
	mmu_notifier_unregister(&mn, registered);
	registered = NULL;
}

static int register_pid_locked(pid_t nr)
{
	struct mm_struct *mm = hp_pid_mm(nr);
	int ret;

	if (IS_ERR(mm))
		return PTR_ERR(mm);
	mn.ops = &mn_ops;
	atomic_long_set(&count, 0);
	ret = mmu_notifier_register(&mn, mm);
	if (!ret)
		registered = mm;	/* mn holds mm_count until unregistered */
	mmput(mm);
	return ret;
}

static ssize_t pid_write(struct file *file, const char __user *buf,
			 size_t len, loff_t *ppos)
{
	int nr, ret;

	ret = kstrtoint_from_user(buf, len, 10, &nr);
	if (ret)
		return ret;
	mutex_lock(&lock);
	unregister_locked();
	if (nr > 0)
		result = register_pid_locked(nr);
	mutex_unlock(&lock);
	return len;
}

static const struct file_operations pid_fops = {
	.owner = THIS_MODULE,
	.write = pid_write,
};

static int result_get(void *data, u64 *val)
{
	*val = (u64)(s64)READ_ONCE(result);
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(result_fops, result_get, NULL, "%lld\n");

static int count_get(void *data, u64 *val)
{
	*val = atomic_long_read(&count);
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(count_fops, count_get, NULL, "%llu\n");

static int __init hp_mn_test_init(void)
{
	dir = debugfs_create_dir("hp_mn_test", NULL);
	if (IS_ERR(dir))
		return PTR_ERR(dir);
	debugfs_create_file("pid", 0200, dir, NULL, &pid_fops);
	debugfs_create_file("result", 0444, dir, NULL, &result_fops);
	debugfs_create_file("count", 0444, dir, NULL, &count_fops);
	return 0;
}

static void __exit hp_mn_test_exit(void)
{
	debugfs_remove_recursive(dir);
	mutex_lock(&lock);
	unregister_locked();
	mutex_unlock(&lock);
}

module_init(hp_mn_test_init);
module_exit(hp_mn_test_exit);
MODULE_DESCRIPTION("halfproc test only: count a member's secondary-MMU invalidations");
MODULE_LICENSE("GPL");
