--[[ Pool's gate at submission (docs/SLURM.md): a job that asks for GPUs in a
     partition Pool governs is held (priority 0) until the pool-slurm bridge
     has an admitted claim for it. Written by `pool-slurm job-submit-lua`;
     GOVERNED lists the governed partitions. ]]

GOVERNED = { @GOVERNED@ }

local function wants_gpu(job_desc)
   for _, field in ipairs({"tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket"}) do
      local value = job_desc[field]
      if value ~= nil and string.find(value, "gpu", 1, true) then
         return true
      end
   end
   return false
end

local function partition_of(job_desc, part_list)
   if job_desc.partition ~= nil then
      return job_desc.partition
   end
   for name, part in pairs(part_list) do
      if part.flag_default == 1 then
         return part.name or name
      end
   end
   return nil
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   local partition = partition_of(job_desc, part_list)
   if partition == nil then
      return slurm.SUCCESS
   end
   for name in string.gmatch(partition, "[^,]+") do
      if GOVERNED[name] and wants_gpu(job_desc) then
         job_desc.priority = 0
         return slurm.SUCCESS
      end
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end
