"""The container launcher's choice of what makes up a container's root."""

from __future__ import annotations

from cdriver.sim.node.simulated.launcher import layer_mounts, unescape_mount_path

MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,size=12334460k
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
50 27 0:40 / /tmp rw,relatime - tmpfs tmpfs rw
51 27 254:1 / /srv/my\\040data rw,relatime - xfs /dev/vdb rw
52 27 254:1 /sub /home rw,relatime - xfs /dev/vdb rw
53 50 0:41 / /tmp/base/pods/x.root rw - tmpfs tmpfs rw
54 27 0:42 / /run/user/0 rw - fuse.portal portal rw
"""


def test_root_layers_are_disks_and_tmpfs_parents_first_without_pseudo_filesystems() -> None:
    assert layer_mounts(MOUNTINFO, "/tmp/base/pods/x.root") == ["/", "/home", "/tmp", "/srv/my data"]


def test_mount_paths_are_unescaped() -> None:
    assert unescape_mount_path("/a\\040b\\011c") == "/a b\tc"
