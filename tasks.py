"""sparkgate tasks: `invoke --list`. Logic lives in sparkgate/tasks/*; this file only assembles."""

from invoke import Collection

from devtasks import fleet_lab, lanes
from sparkgate import defaults
from sparkgate.tasks import bench, bundle, fleet, images, model, sglang, stack

ns = Collection()
# Defaults typed once (sparkgate/defaults.py); override with invoke's config, e.g. INVOKE_SPARKGATE_GATEWAY_PORT.
ns.configure({"sparkgate": defaults.invoke_config()})
for collection in (bench.ns, bundle.ns, stack.ns):
    for name, task_obj in collection.tasks.items():
        ns.add_task(task_obj, name=name)
ns.add_collection(lanes.ns)  # invoke test, test.gpu-pack, test.gpu (developer tasks: devtasks/)
ns.add_collection(images.ns)
ns.add_collection(sglang.ns)
fleet.ns.add_task(fleet_lab.lab, name="lab")  # invoke fleet.lab: the one-machine lab (a developer task)
ns.add_collection(fleet.ns)
ns.add_collection(fleet.bundle_ns)  # invoke bundle.export
ns.add_collection(model.ns)  # invoke model.pull|verify
