"""Filter: what is wrong with a restored container's identity, from `<runtime> inspect`."""

from ansible.errors import AnsibleFilterError


def container_identity_problems(inspect_line, container, image_digest):
    """inspect_line: `{{.Name}} {{.Image}} {{.Config.Image}}` as docker or podman prints it
    (docker's name has a leading '/'). [] when the container has the expected name and runs
    the image pinned by digest; otherwise each problem, naming the observed value."""
    if not isinstance(inspect_line, str) or len(inspect_line.split()) != 3:
        raise AnsibleFilterError(f"container_identity_problems needs 'name image-id image-ref', got {inspect_line!r}")
    if not container or not image_digest:
        raise AnsibleFilterError(f"container_identity_problems needs a container name and an image digest, "
                                 f"got {container!r} and {image_digest!r}")
    name, image_id, reference = inspect_line.split()
    problems = []
    if name.lstrip("/") != container:
        problems.append(f"container is named {name.lstrip('/')}, expected {container}")
    if not reference.endswith("@" + image_digest):
        problems.append(f"container runs {reference} (image {image_id}), expected the image pinned at {image_digest}")
    return problems


class FilterModule:
    def filters(self):
        return {"container_identity_problems": container_identity_problems}
