"""Reading the store: selections of series, merged stacks, series over time, labels,
GPU-hour attribution and fleet findings. Each module builds SQL for the plain table names
(the same statements on chDB, one ClickHouse or a cluster) and shapes the answer."""
