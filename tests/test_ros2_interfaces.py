"""tf2_msgs and controller_manager_msgs built from their definitions (mbctl.hardware.ros2.interfaces), over Fast DDS.

Every DDS packet stays on this machine (localhost discovery), each test on a domain id of its own
(differing between pytest-xdist workers, which are separate processes) and on topic names carrying
the process id, so concurrent sessions cannot mix.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("rclpy", reason='rclpy is not installed (pip install -e ".[test,ros2]")')

from mbctl.hardware.ros2 import interfaces  # noqa: E402
from mbctl.hardware.ros2.runtime import Ros2Runtime, Ros2Unavailable  # noqa: E402

_domains = itertools.count()
WAIT_S = 20.0  # generous: only a bound on waiting, never a speed requirement


def domain_id() -> int:
    """A DDS domain for one test: unique in this process, and different for another process (worker)."""
    return 1 + (os.getpid() * 7 + next(_domains)) % 200


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {WAIT_S} s")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, interfaces.BuildResult]:
    """Both packages built into a cache of this module's own, which the imports below then use."""
    cache = tmp_path_factory.mktemp("ros2-interfaces")
    mp = pytest.MonkeyPatch()
    mp.setenv(interfaces.CACHE_ENV, str(cache))
    mp.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    results = {name: interfaces.build_package(name) for name in interfaces.PACKAGES}
    yield results
    mp.undo()


@pytest.fixture
def ros(built):
    with Ros2Runtime(domain_id=domain_id()) as runtime:
        yield runtime


def jazzy_hash(typename: str, definitions: dict[str, str] | None = None) -> str:
    """RIHS01 of ``typename`` computed by rosbags (an implementation independent of rosidl) from jazzy's types."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_JAZZY)
    for name, text in (definitions or {}).items():
        # rosbags files every parsed type under msg/; the name (which enters the hash) is set back
        (fields,) = get_types_from_msg(text, name).values()
        store.register({name: fields})
    return store.hash_rihs01(typename)


def test_a_cold_build_is_reported_and_complete(built):
    """Each package is built once (its time stated), with the five shared libraries of ROS's layout in its manifest."""
    for name, result in built.items():
        assert not result.reused and result.seconds > 0
        manifest = json.loads((result.path / "mbctl-build.json").read_text())
        assert manifest["package"] == name and len(manifest["sha256"]) == 5
        print(f"{name}: built in {result.seconds:.1f} s")


def test_tf_message_between_two_nodes(ros):
    """A TFMessage published by one node arrives whole at another; wire name and type hash are the official ones."""
    from geometry_msgs.msg import TransformStamped

    TFMessage = interfaces.tf_message_type()
    topic = f"/mbctl_test_{os.getpid()}/tf"
    received = []
    ros.node("listener").create_subscription(TFMessage, topic, received.append, 10)
    talker = ros.node("talker")
    publisher = talker.create_publisher(TFMessage, topic, 10)
    sent = TFMessage()
    for child, x in (("upper_arm_link", 0.1), ("tool0", -0.25)):
        t = TransformStamped()
        t.header.frame_id, t.header.stamp.sec, t.child_frame_id = "base_link", 12, child
        t.transform.translation.x, t.transform.rotation.z, t.transform.rotation.w = x, 0.6, 0.8
        sent.transforms.append(t)

    def arrived() -> bool:
        publisher.publish(sent)
        return bool(received)

    wait_for(arrived, "TFMessage")
    got = received[0]
    assert [t.child_frame_id for t in got.transforms] == ["upper_arm_link", "tool0"]
    assert got.transforms[1].transform.translation.x == -0.25 and got.transforms[0].header.stamp.sec == 12
    (info,) = talker.get_publishers_info_by_topic(topic)
    assert info.topic_type == "tf2_msgs/msg/TFMessage"
    assert str(info.topic_type_hash) == jazzy_hash("tf2_msgs/msg/TFMessage")


def test_switch_controller_served_and_called(ros):
    """A SwitchController service on one node answers a call from another; the service's wire name is the official one."""
    SwitchController = interfaces.switch_controller_type()
    name = f"/mbctl_test_{os.getpid()}/controller_manager/switch_controller"
    requests = []

    def switch(request, response):
        requests.append(request)
        response.ok = request.strictness == SwitchController.Request.STRICT and request.activate_asap
        response.message = "activated " + ",".join(request.activate_controllers)
        return response

    server = ros.node("controller_manager")
    server.create_service(SwitchController, name, switch)
    client = ros.node("mbctl_run").create_client(SwitchController, name)
    assert client.wait_for_service(timeout_sec=WAIT_S)
    request = SwitchController.Request(
        activate_controllers=["hold_position"], deactivate_controllers=["effort_controller"], strictness=SwitchController.Request.STRICT, activate_asap=True
    )
    request.timeout.sec = 2
    future = client.call_async(request)
    wait_for(future.done, "SwitchController response")
    assert future.result().ok and future.result().message == "activated hold_position"
    assert list(requests[0].deactivate_controllers) == ["effort_controller"] and requests[0].timeout.sec == 2
    assert (SwitchController.Request.BEST_EFFORT, SwitchController.Request.STRICT) == (1, 2)
    assert dict(server.get_service_names_and_types())[name] == ["controller_manager_msgs/srv/SwitchController"]


def test_switch_controller_request_and_response_hashes(ros):
    """Request and response as built hash as rosbags hashes jazzy's definition (fields, types and order all enter)."""
    SwitchController = interfaces.switch_controller_type()
    definition = (interfaces.IDL_DIR / "controller_manager_msgs" / "srv" / "SwitchController.srv").read_text()
    request_text, response_text = definition.split("---")
    node = ros.node("hashes")
    for part, text in (("Request", request_text), ("Response", response_text)):
        typename = f"controller_manager_msgs/srv/SwitchController_{part}"
        topic = f"/mbctl_test_{os.getpid()}/{part.lower()}"
        node.create_publisher(getattr(SwitchController, part), topic, 1)
        (info,) = node.get_publishers_info_by_topic(topic)
        assert info.topic_type == typename
        assert str(info.topic_type_hash) == jazzy_hash(typename, {typename: text})
    # a changed field changes the hash: the comparison above can fail
    changed = request_text.replace("bool activate_asap", "bool start_asap")
    assert jazzy_hash("x/srv/S_Request", {"x/srv/S_Request": changed}) != jazzy_hash("x/srv/S_Request", {"x/srv/S_Request": request_text})


def test_a_second_build_reuses_the_cache(built):
    """Building again finds the entry: nothing is compiled, the libraries are the same files."""
    first = built["tf2_msgs"]
    stamps = {p: p.stat().st_mtime_ns for p in first.path.rglob("*.so")}
    again = interfaces.build_package("tf2_msgs")
    assert again.reused and again.path == first.path and again.seconds == 0.0
    assert {p: p.stat().st_mtime_ns for p in again.path.rglob("*.so")} == stamps


@pytest.mark.parametrize("damage", ["truncated type support", "no manifest"])
def test_a_broken_entry_is_rebuilt(built, tmp_path, damage):
    """A copy of a good cache is reused as it is; damaged, its entry is rebuilt (a killed build's leftovers removed) and then valid again."""
    good = built["tf2_msgs"].path
    cache = tmp_path / "cache"
    shutil.copytree(good.parent, cache, ignore=shutil.ignore_patterns("*.lock", ".tf2*", "controller*"))
    assert interfaces.build_package("tf2_msgs", cache).reused  # the control: an intact copy
    entry = cache / good.name
    (cache / f".{good.name}.killed" / "gen").mkdir(parents=True)  # what a build killed midway leaves
    if damage == "no manifest":
        (entry / "mbctl-build.json").unlink()
    else:
        library = entry / "lib" / "libtf2_msgs__rosidl_typesupport_fastrtps_c.so"
        library.write_bytes(library.read_bytes()[:1000])
    rebuilt = interfaces.build_package("tf2_msgs", cache)
    assert not rebuilt.reused and rebuilt.path == entry
    assert interfaces.build_package("tf2_msgs", cache).reused
    assert [p.name for p in cache.iterdir() if p.name.startswith(".tf2")] == []  # no temporary directory left, nor the killed one


_BUILD_AND_IMPORT = """
import json, sys
from mbctl.hardware.ros2 import interfaces
result = interfaces.build_package("tf2_msgs")
TFMessage = interfaces.tf_message_type()
print(json.dumps({"reused": result.reused, "module": sys.modules[TFMessage.__module__].__file__, "fields": list(TFMessage.get_fields_and_field_types())}))
"""


def _python(code: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_two_processes_building_at_once_share_one_build(tmp_path):
    """Two fresh processes asking for tf2_msgs in an empty cache at once: one builds, the other waits and reuses it, both import it."""
    cache = tmp_path / "cache"
    procs = [_python(_BUILD_AND_IMPORT, **{interfaces.CACHE_ENV: str(cache)}) for _ in range(2)]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(o["reused"] for o in outputs) == [False, True]
    (entry,) = [p for p in cache.iterdir() if p.is_dir()]
    for o in outputs:
        assert Path(o["module"]).is_relative_to(entry) and o["fields"] == ["transforms"]


def test_an_installed_package_is_used_as_it_is(tmp_path):
    """Where Python finds tf2_msgs already (a sourced ROS 2), its class is returned and nothing is built."""
    fake = tmp_path / "site" / "tf2_msgs" / "msg"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("class TFMessage:\n    origin = 'sourced'\n")
    code = "from mbctl.hardware.ros2 import interfaces; print(interfaces.tf_message_type().origin)"
    env = {interfaces.CACHE_ENV: str(tmp_path / "cache"), "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])}
    out, err = _python(code, **env).communicate(timeout=120)
    assert out.strip() == "sourced", err
    assert not (tmp_path / "cache").exists()


def test_no_compiler_is_one_line(tmp_path, monkeypatch):
    """Without a C/C++ compiler the build refuses in one line naming what is missing (the builds above are the accepted case)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(Ros2Unavailable) as refused:
        interfaces.build_package("tf2_msgs", tmp_path / "cache")
    assert "compiler" in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "cache").exists()


def test_the_definitions_ship_with_the_package():
    """Each package's definition files are where the build looks for them, with their origin stated."""
    notice = (interfaces.IDL_DIR / "NOTICE.md").read_text()
    for pkg in interfaces.PACKAGES.values():
        for rel in pkg.files:
            assert (interfaces.IDL_DIR / pkg.name / rel).is_file()
        assert pkg.name in notice
    assert Path(interfaces.__file__).parent / "idl" == interfaces.IDL_DIR
