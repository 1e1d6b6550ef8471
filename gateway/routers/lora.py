"""`POST /v1/load_lora_adapter` and `POST /v1/unload_lora_adapter`, with vLLM's bodies: LoRA adapters
loaded and unloaded while the server runs (admin keys only when keys are on). An adapter that requests
are using cannot be unloaded (400); requests of other adapters are not disturbed."""

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from gateway.deps import State, require_admin_key

router = APIRouter(prefix="/v1", dependencies=[Depends(require_admin_key)])


class LoadLoRAAdapter(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)
    base_model_name: str | None = None  # ours: which embedded model (default: the first)


class UnloadLoRAAdapter(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lora_name: str = Field(min_length=1)
    lora_int_id: int | None = None  # accepted as vLLM's body has it; the name decides


@router.post("/load_lora_adapter", response_class=PlainTextResponse)
async def load_lora_adapter(body: LoadLoRAAdapter, state: State) -> str:
    await state.models.load_lora(body.lora_name, body.lora_path, body.base_model_name)
    return f"Success: LoRA adapter '{body.lora_name}' added successfully."


@router.post("/unload_lora_adapter", response_class=PlainTextResponse)
async def unload_lora_adapter(body: UnloadLoRAAdapter, state: State) -> str:
    await state.models.unload_lora(body.lora_name)
    return f"Success: LoRA adapter '{body.lora_name}' removed successfully."
