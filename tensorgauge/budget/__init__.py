"""Budgets: keep a job inside a memory, CPU and GPU-memory budget.

``limits`` parses and checks what the user asked for; ``enforce`` applies it to
the job (cgroup, affinity, thread pools) and watches the samples.
"""
