"""Filter: what is wrong with a restored container's identity, from `<runtime> inspect`."""

from ansible.errors import AnsibleFilterError


def container_identity_problems(inspect_line, container, image):
    """inspect_line: `{{.Name}} {{.Image}} {{.Config.Image}}` as docker or podman prints it
    (docker's name has a leading '/'); image: the original recipe's image reference. [] when the
    container has the expected name and runs that image: the same digest when the recipe pins
    one, else the same reference (podman may prefix the registry). Otherwise each problem."""
    if not isinstance(inspect_line, str) or len(inspect_line.split()) != 3:
        raise AnsibleFilterError(f"container_identity_problems needs 'name image-id image-ref', got {inspect_line!r}")
    if not container or not image:
        raise AnsibleFilterError(f"container_identity_problems needs a container name and an image, "
                                 f"got {container!r} and {image!r}")
    name, image_id, reference = inspect_line.split()
    problems = []
    if name.lstrip("/") != container:
        problems.append(f"container is named {name.lstrip('/')}, expected {container}")
    if "@sha256:" in image:
        same = reference.endswith("@" + image.split("@", 1)[1])
    else:
        same = reference == image or reference.endswith("/" + image)
    if not same:
        problems.append(f"container runs {reference} (image {image_id}), expected {image}")
    return problems


class FilterModule:
    def filters(self):
        return {"container_identity_problems": container_identity_problems}
