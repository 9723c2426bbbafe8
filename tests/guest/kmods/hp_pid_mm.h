/* SPDX-License-Identifier: GPL-2.0 */
/* Test-only modules (hp_mn_test.c, hp_set_test.c): a pid's mm. */
#ifndef HP_PID_MM_H
#define HP_PID_MM_H

#include <linux/err.h>
#include <linux/pid.h>
#include <linux/sched/mm.h>
#include <linux/sched/task.h>

/*
 * The mm of the task with pid @nr (in the caller's pid namespace), with
 * mm_users held (mmput() it), or ERR_PTR(-ESRCH) for no such task and
 * ERR_PTR(-EINVAL) for a task without an mm.
 */
static inline struct mm_struct *hp_pid_mm(pid_t nr)
{
	struct task_struct *task;
	struct mm_struct *mm;
	struct pid *pid;

	pid = find_get_pid(nr);
	task = get_pid_task(pid, PIDTYPE_PID);
	put_pid(pid);
	if (!task)
		return ERR_PTR(-ESRCH);
	mm = get_task_mm(task);
	put_task_struct(task);
	return mm ? mm : ERR_PTR(-EINVAL);
}

#endif /* HP_PID_MM_H */
