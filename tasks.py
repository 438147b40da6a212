"""sparkgate tasks: `invoke --list`. Logic lives in sparkgate/tasks/*; this file only assembles."""

from invoke import Collection

from sparkgate.tasks import bundle

ns = Collection()
for name, task_obj in bundle.ns.tasks.items():
    ns.add_task(task_obj, name=name)
